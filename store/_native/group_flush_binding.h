/* store._kernels.GroupFlush (group_flush.c): added to the module by PyInit__kernels. */
#ifndef TIDEMQ_GROUP_FLUSH_BINDING_H
#define TIDEMQ_GROUP_FLUSH_BINDING_H
#include <Python.h>

/* Adds the GroupFlush type and the SERVE_* codes to `module`; -1 with an exception on failure. */
int add_group_flush(PyObject *module);

#endif
