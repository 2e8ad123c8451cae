/* store._kernels.Mapping and punch_hole (mapping.c): added to the module by PyInit__kernels. */
#ifndef TIDEMQ_MAPPING_BINDING_H
#define TIDEMQ_MAPPING_BINDING_H
#include <Python.h>

/* Adds the Mapping type, punch_hole and the MADV_* constants to `module`; -1 with an exception on failure. */
int add_mapping(PyObject *module);

#endif
