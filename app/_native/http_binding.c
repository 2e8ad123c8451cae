/* app._http: the Python binding of http_request_whole and produce_request (http_request.h, produce_request.h,
 * docs/native.md). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "http_request.h"
#include "produce_request.h"

/* The field's name as a new bytes object, lowercased (as the ASGI scope carries header names). */
static PyObject *lowered_name(const uint8_t *p, const struct http_field *f) {
    PyObject *name = PyBytes_FromStringAndSize((const char *)p + f->name_at, (Py_ssize_t)f->name_len);
    if (name == NULL) return NULL;
    char *s = PyBytes_AS_STRING(name);
    for (size_t i = 0; i < f->name_len; i++) {
        if (s[i] >= 'A' && s[i] <= 'Z') s[i] = (char)(s[i] + 32);
    }
    return name;
}

/* [(name, value), ...] as uvicorn's scope has them: names lowercased, in the order sent. */
static PyObject *header_list(const uint8_t *p, const struct http_request *r) {
    PyObject *list = PyList_New((Py_ssize_t)r->fields);
    if (list == NULL) return NULL;
    for (size_t i = 0; i < r->fields; i++) {
        const struct http_field *f = &r->field[i];
        PyObject *name = lowered_name(p, f);
        PyObject *pair = name == NULL ? NULL : Py_BuildValue("(Ny#)", name, p + f->value_at, (Py_ssize_t)f->value_len);
        if (pair == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, pair);
    }
    return list;
}

static PyObject *py_whole_request(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    Py_ssize_t max_head;
    if (!PyArg_ParseTuple(args, "y*n", &data, &max_head)) return NULL;
    struct http_request r;
    PyObject *result = NULL;
    if (max_head < 0 || !http_request_whole(data.buf, (size_t)data.len, (size_t)max_head, &r)) {
        PyBuffer_Release(&data);
        Py_RETURN_NONE;
    }
    const uint8_t *p = data.buf;
    PyObject *headers = header_list(p, &r);
    if (headers != NULL) {
        result = Py_BuildValue("(Oy#Ny#OO)", r.is_post ? Py_True : Py_False, p + r.target_at, (Py_ssize_t)r.target_len, headers,
                               p + r.head_len, (Py_ssize_t)r.body_len, r.keep_alive ? Py_True : Py_False,
                               r.http_10 ? Py_True : Py_False);
    }
    PyBuffer_Release(&data);
    return result;
}

static PyObject *py_produce_request(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    Py_ssize_t max_head, max_body;
    if (!PyArg_ParseTuple(args, "y*nn", &data, &max_head, &max_body)) return NULL;
    struct produce_request r;
    PyObject *result = NULL;
    if (max_head < 0 || max_body < 0 || !produce_request(data.buf, (size_t)data.len, (size_t)max_head, &r) ||
        r.request.body_len > (size_t)max_body) {
        PyBuffer_Release(&data);
        Py_RETURN_NONE;
    }
    const uint8_t *p = data.buf;
    PyObject *auth = r.has_auth ? PyBytes_FromStringAndSize((const char *)p + r.auth_at, (Py_ssize_t)r.auth_len) : Py_NewRef(Py_None);
    if (auth == NULL) {
        PyBuffer_Release(&data);
        return NULL;
    }
    result = Py_BuildValue("(y#y#y#OON)", p + r.topic_at, (Py_ssize_t)r.topic_len, p + r.query_at, (Py_ssize_t)r.query_len,
                           p + r.request.head_len, (Py_ssize_t)r.request.body_len, r.request.keep_alive ? Py_True : Py_False,
                           r.is_json ? Py_True : Py_False, auth);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"whole_request", py_whole_request, METH_VARARGS,
     "whole_request(data, max_head) -> (is_post, target, headers, body, keep_alive, http_10) | None"},
    {"produce_request", py_produce_request, METH_VARARGS,
     "produce_request(data, max_head, max_body) -> (topic, query, body, keep_alive, is_json, authorization) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "app._http", "A whole HTTP request read without callbacks.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__http(void) { return PyModule_Create(&module); }
