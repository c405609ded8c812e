/* Included before everything else in the wrapper of a limited-API build
 * (HILOCK_PYTHON_LIMITED_API, bindings/CMakeLists.txt): Python.h, as the
 * wrapper includes it, then the macros of CPython's full API that
 * py_helpers.h uses, as the limited API's functions with the same
 * references (borrowed where the macro's is borrowed, stolen where it
 * steals). Some of them are defined by Python.h even under the limited
 * API, on top of macros it does not export: they are replaced. */
#ifndef HILOCK_LIMITED_API_H
#define HILOCK_LIMITED_API_H

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#undef PyTuple_GET_ITEM
#undef PyList_SET_ITEM
#undef PyByteArray_AS_STRING
#undef PyByteArray_GET_SIZE
#undef PySequence_Fast_GET_SIZE
#undef PySequence_Fast_GET_ITEM
#define PyTuple_GET_ITEM(t, i) PyTuple_GetItem((t), (i))
#define PyList_SET_ITEM(l, i, v) ((void)PyList_SetItem((l), (i), (v)))
#define PyByteArray_AS_STRING(b) PyByteArray_AsString(b)
#define PyByteArray_GET_SIZE(b) PyByteArray_Size(b)
/* PySequence_Fast's result is a list or a tuple. */
#define PySequence_Fast_GET_SIZE(s) \
  (PyList_Check(s) ? PyList_Size(s) : PyTuple_Size(s))
#define PySequence_Fast_GET_ITEM(s, i) \
  (PyList_Check(s) ? PyList_GetItem((s), (i)) : PyTuple_GetItem((s), (i)))

#endif
