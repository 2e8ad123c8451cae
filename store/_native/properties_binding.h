/* store._kernels.encode_properties, included by kernels.c after its helpers.
 *
 * A message's property string as RocketMQ writes it (MessageDecoder.messageProperties2String): each
 * name, 0x01, the value, 0x02, in the map's order, UTF-8. store.codec.message.encode_properties is
 * the reference; MessageInner.refresh calls this for every message it makes or changes. */
#ifndef TIDEMQ_PROPERTIES_BINDING_H
#define TIDEMQ_PROPERTIES_BINDING_H

/* The UTF-8 of an exact str (cached in the object by CPython; ASCII text is the object's own data). NULL with
 * UnicodeEncodeError for a lone surrogate, as str.encode("utf-8") raises. */
static const char *utf8_of(PyObject *text, Py_ssize_t *len) { return PyUnicode_AsUTF8AndSize(text, len); }

/* Bytes the property string of `props` takes; -1 with an exception set (an encoding error, a size past
 * PY_SSIZE_T_MAX), -2 when a name or value is not an exact str (the caller formats those as the reference). */
static Py_ssize_t properties_size(PyObject *props) {
    Py_ssize_t pos = 0, total = 0, name_len, value_len;
    PyObject *name, *value;
    while (PyDict_Next(props, &pos, &name, &value)) {
        if (!PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(value)) return -2;
        if (utf8_of(name, &name_len) == NULL || utf8_of(value, &value_len) == NULL) return -1;
        size_t need = (size_t)name_len + (size_t)value_len + 2; /* each below 2^63: no wrap in size_t */
        if (need > (size_t)(PY_SSIZE_T_MAX - total)) {
            PyErr_NoMemory();
            return -1;
        }
        total += (Py_ssize_t)need;
    }
    return total;
}

/* encode_properties(properties: dict) -> bytes, or None when `properties` is not a dict or a name or value is not
 * a str. Nothing runs
 * Python code between the sizing pass and the copying pass (the GIL is held, the dict is not touched by
 * either), so the second pass sees the items the first one sized. */
static PyObject *py_encode_properties(PyObject *Py_UNUSED(self), PyObject *props) {
    if (!PyDict_CheckExact(props)) Py_RETURN_NONE; /* another mapping: the reference iterates its items() */
    Py_ssize_t total = properties_size(props);
    if (total == -2) Py_RETURN_NONE;
    if (total < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    char *dst = PyBytes_AS_STRING(out);
    char *const end = dst + total;
    Py_ssize_t pos = 0, name_len, value_len;
    PyObject *name, *value;
    while (PyDict_Next(props, &pos, &name, &value)) {
        const char *name_utf8 = utf8_of(name, &name_len), *value_utf8 = utf8_of(value, &value_len);
        if (name_utf8 == NULL || value_utf8 == NULL || name_len + value_len + 2 > end - dst) { /* the sizing pass saw */
            Py_DECREF(out);                                                                  /* these: never taken */
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "properties changed while encoded");
            return NULL;
        }
        memcpy(dst, name_utf8, (size_t)name_len);
        dst += name_len;
        *dst++ = '\x01';
        memcpy(dst, value_utf8, (size_t)value_len);
        dst += value_len;
        *dst++ = '\x02';
    }
    if (dst != end) { /* fewer items than sized: never, as above */
        Py_DECREF(out);
        PyErr_SetString(PyExc_RuntimeError, "properties changed while encoded");
        return NULL;
    }
    return out;
}

/* decode_properties(data) -> dict: each item of a property string (up to 0x02) with a 0x01 in it, the name before
 * the first 0x01 and the value after it, each decoded from UTF-8 with U+FFFD for what is not well-formed; a name
 * met again keeps its first place and takes the last value (store.codec.message.parse_properties is the reference:
 * it decodes the whole text first, which decodes alike, the separators being ASCII bytes that no ill-formed
 * sequence takes in). Every span lies inside the buffer: each item ends at the next 0x02 or the end. */
static PyObject *py_decode_properties(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = PyDict_New();
    const char *p = data.buf;
    size_t n = (size_t)data.len, i = 0;
    while (out != NULL && i < n) {
        const char *item = p + i, *stop = memchr(item, '\x02', n - i);
        size_t len = stop != NULL ? (size_t)(stop - item) : n - i;
        const char *sep = len > 0 ? memchr(item, '\x01', len) : NULL;
        if (sep != NULL) {
            PyObject *name = PyUnicode_DecodeUTF8(item, sep - item, "replace");
            PyObject *value = name != NULL ? PyUnicode_DecodeUTF8(sep + 1, item + len - sep - 1, "replace") : NULL;
            if (value == NULL || PyDict_SetItem(out, name, value) < 0) Py_CLEAR(out);
            Py_XDECREF(name);
            Py_XDECREF(value);
        }
        i += len + 1;
    }
    PyBuffer_Release(&data);
    return out;
}

#endif
