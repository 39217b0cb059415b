// Starting the embedded CPython interpreter, once per process.
#pragma once

#include <string>

#include "kcoral/error.hpp"

namespace kcoral::python {

// Starts CPython unless this process already runs it (as inside the Python module), and
// leaves the GIL released. `python_executable` decides sys.executable and with it the
// environment (a virtual environment's site-packages among them); when it is empty or
// missing: $KCORAL_PYTHON, the interpreter found at build time, python3 from PATH.
[[nodiscard]] Status ensure_interpreter(const std::string& python_executable);

}  // namespace kcoral::python
