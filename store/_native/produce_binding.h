/* store._kernels.json_produce (produce.c), included by kernels.c after its helpers. */
#ifndef TIDEMQ_PRODUCE_BINDING_H
#define TIDEMQ_PRODUCE_BINDING_H

#include "bytes.h"

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

/* The bytes of a raw produce's one batch item, as store.put.put_batch.packed_raw's reference packs it (pack_one):
 * TOTALSIZE, MAGICCODE 0, BODYCRC 0, FLAG 0, the body's length, the body, the properties' 2-byte length, then
 * `properties` followed by UNIQ_KEY \x01 head + (first & 0xFFFF) in four hex digits \x02. */
#define RAW_ITEM_KEY_BYTES (sizeof "UNIQ_KEY\x01" - 1 + UNIQ_KEY_CHARS + 1)

static void write_raw_item(uint8_t *out, const char *body, size_t body_len, const char *props, size_t props_len, const char *head,
                           uint32_t first) {
    size_t all_props = props_len + RAW_ITEM_KEY_BYTES, total = BATCH_FIXED_BYTES + body_len + all_props;
    wr_u32(out, (uint32_t)total);
    memset(out + 4, 0, 12); /* MAGICCODE, BODYCRC, FLAG */
    wr_u32(out + 16, (uint32_t)body_len);
    uint8_t *p = out + 20;
    memcpy(p, body, body_len);
    p += body_len;
    p[0] = (uint8_t)(all_props >> 8);
    p[1] = (uint8_t)all_props;
    p += 2;
    memcpy(p, props, props_len);
    p += props_len;
    memcpy(p, "UNIQ_KEY\x01", sizeof "UNIQ_KEY\x01" - 1);
    p += sizeof "UNIQ_KEY\x01" - 1;
    memcpy(p, head, UNIQ_KEY_CHARS - 4);
    put_hex4(p + UNIQ_KEY_CHARS - 4, first & 0xFFFF);
    p[UNIQ_KEY_CHARS] = '\x02';
}

/* raw_item(body: bytes, properties: bytes, head: bytes, first: int) -> bytes; ValueError for a head that is not
 * 28 characters, OverflowError when the properties or the item do not fit their length fields. */
static PyObject *py_raw_item(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1]) || !PyBytes_Check(args[2]) || !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "raw_item(body: bytes, properties: bytes, head: bytes, first: int)");
        return NULL;
    }
    size_t body_len = (size_t)PyBytes_GET_SIZE(args[0]), props_len = (size_t)PyBytes_GET_SIZE(args[1]);
    if (PyBytes_GET_SIZE(args[2]) != UNIQ_KEY_CHARS - 4) {
        PyErr_Format(PyExc_ValueError, "a UNIQ_KEY head has %d characters, not %zd", UNIQ_KEY_CHARS - 4, PyBytes_GET_SIZE(args[2]));
        return NULL;
    }
    unsigned long first = PyLong_AsUnsignedLongMask(args[3]);
    if (first == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    if (props_len > 0xFFFF - RAW_ITEM_KEY_BYTES) {
        PyErr_SetString(PyExc_OverflowError, "the properties do not fit a batch item's 2-byte length");
        return NULL;
    }
    if (body_len > (size_t)INT32_MAX - BATCH_FIXED_BYTES - 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError, "the body does not fit a batch item's 4-byte length");
        return NULL;
    }
    size_t total = BATCH_FIXED_BYTES + body_len + props_len + RAW_ITEM_KEY_BYTES;
    PyObject *item = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (item == NULL) return NULL;
    write_raw_item((uint8_t *)PyBytes_AS_STRING(item), PyBytes_AS_STRING(args[0]), body_len, PyBytes_AS_STRING(args[1]), props_len,
                   PyBytes_AS_STRING(args[2]), (uint32_t)first);
    return item;
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
