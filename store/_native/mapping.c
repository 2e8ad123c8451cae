/* store._kernels.Mapping: a shared read-write mapping of a file that holds no file descriptor.
 *
 * CPython's mmap.mmap keeps a dup() of the descriptor it maps for as long as the mapping lives,
 * so a store with thousands of mapped files holds thousands of descriptors. A mapping does not
 * need its descriptor once mmap(2) returned: this type maps, and the caller closes the descriptor.
 *
 * It offers what the store uses of mmap.mmap: the buffer protocol (writable), len(), slices read
 * as bytes and written from any buffer of the same length, find, flush (msync MS_SYNC, GIL
 * released), madvise and close. close() refuses with BufferError while a buffer of the mapping
 * is exported, as mmap.mmap does, so no view ever outlives the pages it points at; flush and
 * madvise count as an export while they run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mapping_binding.h"

typedef struct {
    PyObject_HEAD
    uint8_t *data; /* NULL once closed */
    Py_ssize_t size;
    Py_ssize_t exports; /* buffers handed out and not released, plus msync/madvise calls under way */
} Mapping;

static size_t page_size(void) {
    long sz = sysconf(_SC_PAGESIZE);
    return sz > 0 ? (size_t)sz : 4096;
}

static int check_open(const Mapping *self) {
    if (self->data == NULL) {
        PyErr_SetString(PyExc_ValueError, "mapping closed");
        return -1;
    }
    return 0;
}

/* [start, start+length) inside the mapping; -1 with ValueError otherwise. */
static int check_span(const Mapping *self, Py_ssize_t start, Py_ssize_t length) {
    if (start < 0 || length < 0 || start > self->size || length > self->size - start) {
        PyErr_Format(PyExc_ValueError, "range %zd+%zd outside a mapping of %zd bytes", start, length, self->size);
        return -1;
    }
    return 0;
}

static PyObject *mapping_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fd", "length", NULL};
    int fd;
    Py_ssize_t length;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "in", kwlist, &fd, &length)) return NULL;
    if (length <= 0) {
        PyErr_SetString(PyExc_ValueError, "a mapping needs a positive length");
        return NULL;
    }
    void *p = mmap(NULL, (size_t)length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return PyErr_SetFromErrno(PyExc_OSError);
    Mapping *self = (Mapping *)type->tp_alloc(type, 0);
    if (self == NULL) {
        munmap(p, (size_t)length);
        return NULL;
    }
    self->data = p;
    self->size = length;
    self->exports = 0;
    return (PyObject *)self;
}

static void mapping_dealloc(Mapping *self) {
    assert(self->exports == 0 && "an exported buffer keeps its mapping alive");
    if (self->data != NULL) munmap(self->data, (size_t)self->size);
    self->data = NULL;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *mapping_close(Mapping *self, PyObject *Py_UNUSED(ignored)) {
    if (self->exports > 0) {
        PyErr_SetString(PyExc_BufferError, "cannot close a mapping while its buffer is exported");
        return NULL;
    }
    if (self->data != NULL && munmap(self->data, (size_t)self->size) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    self->data = NULL;
    Py_RETURN_NONE;
}

/* msync(MS_SYNC) of the pages holding [offset, offset+size), the GIL released. */
static PyObject *mapping_flush(Mapping *self, PyObject *args) {
    Py_ssize_t offset = 0, size = -1;
    if (!PyArg_ParseTuple(args, "|nn", &offset, &size)) return NULL;
    if (check_open(self) < 0) return NULL;
    if (size < 0) size = self->size - offset;
    if (check_span(self, offset, size) < 0) return NULL;
    if (size == 0) Py_RETURN_NONE;
    size_t aligned = (size_t)offset - (size_t)offset % page_size();
    int rc;
    self->exports++;
    Py_BEGIN_ALLOW_THREADS rc = msync(self->data + aligned, (size_t)offset + (size_t)size - aligned, MS_SYNC);
    Py_END_ALLOW_THREADS self->exports--;
    if (rc != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/* madvise(advice) of the whole pages inside [start, start+length) (all of them when length is -1). */
static PyObject *mapping_madvise(Mapping *self, PyObject *args) {
    int advice;
    Py_ssize_t start = 0, length = -1;
    if (!PyArg_ParseTuple(args, "i|nn", &advice, &start, &length)) return NULL;
    if (check_open(self) < 0) return NULL;
    if (length < 0) length = self->size - start;
    if (check_span(self, start, length) < 0) return NULL;
    size_t page = page_size();
    size_t from = ((size_t)start + page - 1) / page * page, to = ((size_t)start + (size_t)length) / page * page;
    if ((Py_ssize_t)to == self->size) to = (size_t)self->size; /* the last, partial page of the file counts whole */
    if (from >= to) Py_RETURN_NONE;
    int rc;
    self->exports++;
    Py_BEGIN_ALLOW_THREADS rc = madvise(self->data + from, to - from, advice);
    Py_END_ALLOW_THREADS self->exports--;
    if (rc != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyObject *mapping_find(Mapping *self, PyObject *args) {
    Py_buffer sub;
    Py_ssize_t start = 0, end = PY_SSIZE_T_MAX;
    if (!PyArg_ParseTuple(args, "y*|nn", &sub, &start, &end)) return NULL;
    PyObject *result = NULL;
    if (check_open(self) == 0) {
        /* As a slice's bounds (mmap.mmap.find's): negative ones count from the end. */
        if (start < 0) start = start + self->size < 0 ? 0 : start + self->size;
        if (end < 0) end = end + self->size < 0 ? 0 : end + self->size;
        if (end > self->size) end = self->size;
        Py_ssize_t found = -1;
        if (end - start >= sub.len) {
            const uint8_t *hit = memmem(self->data + start, (size_t)(end - start), sub.buf, (size_t)sub.len);
            if (hit != NULL) found = hit - self->data;
        }
        result = PyLong_FromSsize_t(found);
    }
    PyBuffer_Release(&sub);
    return result;
}

static PyObject *mapping_address(Mapping *self, void *Py_UNUSED(closure)) {
    if (check_open(self) < 0) return NULL;
    return PyLong_FromVoidPtr(self->data);
}

static PyObject *mapping_closed(Mapping *self, void *Py_UNUSED(closure)) { return PyBool_FromLong(self->data == NULL); }

static Py_ssize_t mapping_length(Mapping *self) { return self->size; }

/* A slice (step 1) as its bounds in the mapping; -1 with an exception otherwise. */
static int slice_bounds(const Mapping *self, PyObject *key, Py_ssize_t *start, Py_ssize_t *stop) {
    Py_ssize_t step;
    if (PySlice_Unpack(key, start, stop, &step) < 0) return -1;
    PySlice_AdjustIndices(self->size, start, stop, step);
    if (step != 1) {
        PyErr_SetString(PyExc_ValueError, "a mapping slice takes no step");
        return -1;
    }
    if (*stop < *start) *stop = *start;
    return 0;
}

static PyObject *mapping_subscript(Mapping *self, PyObject *key) {
    if (check_open(self) < 0) return NULL;
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return NULL;
        if (i < 0) i += self->size;
        if (i < 0 || i >= self->size) {
            PyErr_SetString(PyExc_IndexError, "mapping index out of range");
            return NULL;
        }
        return PyLong_FromLong(self->data[i]);
    }
    if (!PySlice_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "mapping indices must be integers or slices");
        return NULL;
    }
    Py_ssize_t start, stop;
    if (slice_bounds(self, key, &start, &stop) < 0) return NULL;
    return PyBytes_FromStringAndSize((const char *)self->data + start, stop - start);
}

static int mapping_ass_subscript(Mapping *self, PyObject *key, PyObject *value) {
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "mapping bytes cannot be deleted");
        return -1;
    }
    if (check_open(self) < 0) return -1;
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return -1;
        if (i < 0) i += self->size;
        long v = PyLong_AsLong(value);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (i < 0 || i >= self->size || v < 0 || v > 255) {
            PyErr_SetString(PyExc_IndexError, "mapping index or byte value out of range");
            return -1;
        }
        self->data[i] = (uint8_t)v;
        return 0;
    }
    if (!PySlice_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "mapping indices must be integers or slices");
        return -1;
    }
    Py_ssize_t start, stop;
    if (slice_bounds(self, key, &start, &stop) < 0) return -1;
    Py_buffer src;
    if (PyObject_GetBuffer(value, &src, PyBUF_SIMPLE) < 0) return -1;
    int rc = 0;
    if (src.len != stop - start) {
        PyErr_Format(PyExc_IndexError, "a slice of %zd bytes cannot take %zd", stop - start, src.len);
        rc = -1;
    } else if (src.len > 0) {
        memmove(self->data + start, src.buf, (size_t)src.len);
    }
    PyBuffer_Release(&src);
    return rc;
}

static int mapping_getbuffer(Mapping *self, Py_buffer *view, int flags) {
    if (check_open(self) < 0) {
        view->obj = NULL;
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, 0, flags) < 0) return -1;
    self->exports++;
    return 0;
}

static void mapping_releasebuffer(Mapping *self, Py_buffer *Py_UNUSED(view)) {
    assert(self->exports > 0 && "a release matches an export");
    self->exports--;
}

static PyObject *py_punch_hole(PyObject *Py_UNUSED(module), PyObject *args) {
    int fd;
    Py_ssize_t offset, length;
    if (!PyArg_ParseTuple(args, "inn", &fd, &offset, &length)) return NULL;
    if (offset < 0 || length <= 0) {
        PyErr_SetString(PyExc_ValueError, "punch_hole needs offset >= 0 and length > 0");
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length);
    Py_END_ALLOW_THREADS if (rc != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

static PyMethodDef mapping_methods[] = {
    {"close", (PyCFunction)mapping_close, METH_NOARGS, "close() -> unmap; BufferError while a buffer of it is exported"},
    {"flush", (PyCFunction)mapping_flush, METH_VARARGS, "flush(offset=0, size=-1) -> msync(MS_SYNC) of the pages holding the range"},
    {"madvise", (PyCFunction)mapping_madvise, METH_VARARGS, "madvise(advice, start=0, length=-1) -> advice for the whole pages inside"},
    {"find", (PyCFunction)mapping_find, METH_VARARGS, "find(sub, start=0, end=len) -> lowest index of sub in [start, end), or -1"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef mapping_getset[] = {
    {"address", (getter)mapping_address, NULL, "the mapping's address (ValueError once closed)", NULL},
    {"closed", (getter)mapping_closed, NULL, "True once closed", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMappingMethods mapping_as_mapping = {(lenfunc)mapping_length, (binaryfunc)mapping_subscript, (objobjargproc)mapping_ass_subscript};
static PySequenceMethods mapping_as_sequence = {.sq_length = (lenfunc)mapping_length};
static PyBufferProcs mapping_as_buffer = {(getbufferproc)mapping_getbuffer, (releasebufferproc)mapping_releasebuffer};

static PyTypeObject MappingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "store._kernels.Mapping",
    .tp_basicsize = sizeof(Mapping),
    .tp_dealloc = (destructor)mapping_dealloc,
    .tp_as_sequence = &mapping_as_sequence,
    .tp_as_mapping = &mapping_as_mapping,
    .tp_as_buffer = &mapping_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Mapping(fd, length): a shared read-write mapping of the file's first length bytes; keeps no descriptor",
    .tp_methods = mapping_methods,
    .tp_getset = mapping_getset,
    .tp_new = mapping_new,
};

static PyMethodDef module_functions[] = {
    {"punch_hole", py_punch_hole, METH_VARARGS, "punch_hole(fd, offset, length) -> deallocate the range (reads as zeros; the size stays)"},
    {NULL, NULL, 0, NULL},
};

int mapping_pin(PyObject *obj, uint8_t **data, Py_ssize_t *size) {
    if (!PyObject_TypeCheck(obj, &MappingType)) {
        PyErr_Format(PyExc_TypeError, "a Mapping is required, not %.80s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    Mapping *self = (Mapping *)obj;
    if (check_open(self) < 0) return -1;
    self->exports++;
    *data = self->data;
    *size = self->size;
    return 0;
}

void mapping_unpin(PyObject *obj) {
    Mapping *self = (Mapping *)obj;
    assert(self->exports > 0 && "an unpin matches a pin");
    self->exports--;
}

int add_mapping(PyObject *module) {
    if (PyType_Ready(&MappingType) < 0) return -1;
    if (PyModule_AddObjectRef(module, "Mapping", (PyObject *)&MappingType) < 0) return -1;
    if (PyModule_AddFunctions(module, module_functions) < 0) return -1;
    return PyModule_AddIntConstant(module, "MADV_DONTNEED", MADV_DONTNEED) < 0 || PyModule_AddIntConstant(module, "MADV_WILLNEED", MADV_WILLNEED) < 0 ? -1 : 0;
}
