// kcoral._native: the module through which Python reaches libkcoral (native_module.cpp).
//
// It has two homes: the extension module kcoral/_native*.so of the Python package
// (extension.cpp), and a built-in module of a C++ program that embeds the executor, which
// registers it before it creates one:
//
//   KCORAL_TRY(kcoral::register_native_module());
//   auto executor = kcoral::Executor::create({});
//
// so that its programs' kcoral.builtins run on that program's libkcoral, with its one CUPTI
// state, rather than on a second copy inside the extension module.
#pragma once

#include "kcoral/error.hpp"

struct _object;  // PyObject, as <Python.h> declares it

namespace kcoral {

// A new kcoral._native module object (with the GIL held).
[[nodiscard]] _object* create_native_module();

// Builds kcoral._native into the interpreter this process will start: found before any
// kcoral/_native*.so on sys.path. Fails once the interpreter runs.
[[nodiscard]] Status register_native_module();

}  // namespace kcoral
