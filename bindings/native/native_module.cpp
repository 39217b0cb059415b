// The extension-module home of kcoral._native; its contents live in libkcoral
// (libkcoral/src/python/native_module.cpp).
#include "python/native_module.hpp"

PyMODINIT_FUNC PyInit__native() { return kcoral::python::create_native_module(); }
