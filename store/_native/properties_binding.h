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

#endif
