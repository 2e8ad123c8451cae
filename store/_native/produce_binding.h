/* store._kernels.json_produce (produce.c), included by kernels.c after its helpers. */
#ifndef TIDEMQ_PRODUCE_BINDING_H
#define TIDEMQ_PRODUCE_BINDING_H

/* reserve(count) -> (head, first): the UNIQ_KEY head (28 ASCII bytes) and the first of `count` counter values. */
static int fill_drawn_keys(PyObject *packed, size_t len, PyObject *drawn) {
    Py_buffer head;
    PyObject *first_obj;
    if (!PyTuple_Check(drawn) || !PyArg_ParseTuple(drawn, "y*O!", &head, &PyLong_Type, &first_obj)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "reserve(count) must return (head: bytes, first: int)");
        return -1;
    }
    unsigned long first = PyLong_AsUnsignedLongMask(first_obj);
    int failed = first == (unsigned long)-1 && PyErr_Occurred();
    if (!failed && fill_uniq_keys((uint8_t *)PyBytes_AS_STRING(packed), len, span_of(&head), (uint32_t)first) < 0) {
        PyErr_Format(PyExc_ValueError, "a UNIQ_KEY head has %d characters, not %zd", UNIQ_KEY_CHARS - 4, head.len);
        failed = 1;
    }
    PyBuffer_Release(&head);
    return failed ? -1 : 0;
}

/* The binding allocates the output (json_produce_bound) before the GIL is released and trims it after. */
static PyObject *py_json_produce(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer json, reserved;
    Py_ssize_t max_messages, max_body;
    PyObject *reserve;
    if (!PyArg_ParseTuple(args, "y*nny*O", &json, &max_messages, &max_body, &reserved, &reserve)) return NULL;
    PyObject *result = NULL, *packed = NULL, *drawn = NULL;
    struct span text = span_of(&json);
    size_t cap = max_messages < 1 ? 0 : json_produce_bound(text, (size_t)max_messages);
    if (max_messages < 1 || max_body < 0) {
        PyErr_SetString(PyExc_ValueError, "max_messages must be >= 1 and max_body >= 0");
    } else if (cap > (size_t)PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
    } else if ((packed = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap)) != NULL) {
        struct produce_limits lim = {(size_t)max_messages, (size_t)max_body, span_of(&reserved)};
        struct produce_result r;
        PyThreadState *ts = release_gil_for(json.len);
        int outcome = json_produce(text, &lim, (uint8_t *)PyBytes_AS_STRING(packed), cap, &r);
        restore_gil(ts);
        if (outcome != PRODUCE_PACKED) {
            result = Py_NewRef(Py_None);
        } else if ((drawn = PyObject_CallFunction(reserve, "n", (Py_ssize_t)r.count)) != NULL &&
                   fill_drawn_keys(packed, r.len, drawn) == 0 && _PyBytes_Resize(&packed, (Py_ssize_t)r.len) == 0) {
            result = Py_BuildValue("(OnLOO)", packed, (Py_ssize_t)r.count, (long long)r.queue_id, r.is_batch ? Py_True : Py_False, drawn);
        }
    }
    Py_XDECREF(packed);
    Py_XDECREF(drawn);
    PyBuffer_Release(&json);
    PyBuffer_Release(&reserved);
    return result;
}

/* The reply's bytes: at most produce_reply_bound, trimmed to what was written. */
static PyObject *py_render_produce_reply(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer head, host_hex, offsets;
    unsigned long first;
    int queue_id, is_batch;
    long long first_queue_offset, store_timestamp;
    if (!PyArg_ParseTuple(args, "y*ky*iLLy*p", &head, &first, &host_hex, &queue_id, &first_queue_offset, &store_timestamp, &offsets,
                          &is_batch))
        return NULL;
    PyObject *reply = NULL;
    size_t count = (size_t)offsets.len / 16;
    struct produce_reply r = {span_of(&head), span_of(&host_hex), (uint32_t)first, queue_id, first_queue_offset, store_timestamp, is_batch};
    if (offsets.len % 16 != 0 || count == 0 || (!is_batch && count != 1) || head.len != UNIQ_KEY_CHARS - 4) {
        PyErr_SetString(PyExc_ValueError, "offsets must hold 16 bytes a message (one without is_batch) and head 28 characters");
    } else {
        size_t cap = produce_reply_bound(&r, count);
        if ((reply = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap)) != NULL) {
            size_t n = render_produce_reply(&r, offsets.buf, count, (uint8_t *)PyBytes_AS_STRING(reply), cap);
            if (_PyBytes_Resize(&reply, (Py_ssize_t)n) < 0) reply = NULL;
        }
    }
    PyBuffer_Release(&head);
    PyBuffer_Release(&host_hex);
    PyBuffer_Release(&offsets);
    return reply;
}

#endif
