// Starting the embedded CPython interpreter, once per process.
#pragma once

#include <string>

#include "kcoral/error.hpp"

namespace kcoral::python {

// Starts CPython unless this process already runs it (as inside the Python module), and
// leaves the GIL released. `python_executable` decides sys.executable and with it the
// environment (a virtual environment's site-packages among them); empty means
// $KCORAL_PYTHON, or else the interpreter found at build time.
[[nodiscard]] Status ensure_interpreter(const std::string& python_executable);

}  // namespace kcoral::python
