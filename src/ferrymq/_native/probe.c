/* Build probe for the native accelerators; replaced by the first real module. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef probe_module = {PyModuleDef_HEAD_INIT, "probe", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_probe(void) { return PyModule_Create(&probe_module); }
