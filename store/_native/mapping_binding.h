/* store._kernels.Mapping and punch_hole (mapping.c): added to the module by PyInit__kernels. */
#ifndef TIDEMQ_MAPPING_BINDING_H
#define TIDEMQ_MAPPING_BINDING_H
#include <Python.h>
#include <stdint.h>

/* Adds the Mapping type, punch_hole and the MADV_* constants to `module`; -1 with an exception on failure. */
int add_mapping(PyObject *module);

/* The pages of an open Mapping for use without the GIL (store._kernels.GroupFlush): counted as an export, so
 * close() refuses, until mapping_unpin; -1 with TypeError or ValueError (closed) otherwise. Under the GIL. */
int mapping_pin(PyObject *obj, uint8_t **data, Py_ssize_t *size);
void mapping_unpin(PyObject *obj);

#endif
