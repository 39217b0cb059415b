// The kcoral._native module object (see native_module.cpp).
#pragma once

#include "python/py_ref.hpp"

namespace kcoral::python {

// A new kcoral._native module; its PyInit function in either home returns this.
[[nodiscard]] PyObject* create_native_module();

}  // namespace kcoral::python
