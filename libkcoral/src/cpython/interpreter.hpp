// Starting the embedded CPython interpreter, once per process.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kcoral/error.hpp"

namespace kcoral::cpython {

// Starts CPython unless this process already runs it (as inside an extension module), and
// leaves the GIL released. Modules the embedding program builds in are its own to register
// (PyImport_AppendInittab) before this call.
// `python_executable` decides sys.executable and with it the environment (a virtual
// environment's site-packages among them); when it is empty or missing: $KCORAL_PYTHON,
// then python3 from PATH.
[[nodiscard]] Status start_interpreter(const std::string& python_executable);

// Of a running interpreter (each takes the GIL):
// sys.executable;
[[nodiscard]] std::string interpreter_executable();
// the directories it reads from: its prefixes, its executable and sys.path;
[[nodiscard]] std::vector<std::string> interpreter_paths();
// os.environ and the C environment become `variables`, and nothing else (os.environ unsets
// what it knows of; clearenv takes what was set behind its back).
void replace_environment(const std::vector<std::pair<std::string, std::string>>& variables);

}  // namespace kcoral::cpython
