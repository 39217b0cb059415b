// CPython start-up for programs that embed it (C++ tests and examples, C++ users of the executor).
#include "interpreter.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "py_ref.hpp"

namespace kcoral::cpython {

Status start_interpreter(const std::string& python_executable) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (Py_IsInitialized()) return {};

  // The first that exists of: the caller's choice, $KCORAL_PYTHON; else python3 from PATH.
  // Nothing of the build machine: an installed library names no Python of its own.
  std::string executable = "python3";
  const char* from_env = std::getenv("KCORAL_PYTHON");
  for (const char* candidate : {python_executable.c_str(), from_env}) {
    if (candidate != nullptr && *candidate != '\0' && ::access(candidate, X_OK) == 0) {
      executable = candidate;
      break;
    }
  }
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  // The host program owns its signals: a worker must die on SIGTERM, not raise
  // KeyboardInterrupt inside user code.
  config.install_signal_handlers = 0;
  config.parse_argv = 0;
  PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, executable.c_str());
  if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status)) {
    return fail(ErrorKind::engine, std::string("cannot start Python (") + executable + "): " +
                                       (status.err_msg != nullptr ? status.err_msg : "unknown error"));
  }
  PyEval_SaveThread();
  return {};
}

namespace {

// str(sys.<name>), or "" when it is missing or not text. Needs the GIL.
std::string sys_text(PyObject* sys, const char* name) {
  PyRef value = PyRef::steal(sys != nullptr ? PyObject_GetAttrString(sys, name) : nullptr);
  const char* text = value && PyUnicode_Check(value.get()) ? PyUnicode_AsUTF8(value.get()) : nullptr;
  PyErr_Clear();
  return text != nullptr ? text : "";
}

}  // namespace

std::string interpreter_executable() {
  Gil gil;
  PyRef sys = PyRef::steal(PyImport_ImportModule("sys"));
  return sys_text(sys.get(), "executable");
}

std::vector<std::string> interpreter_paths() {
  std::vector<std::string> paths;
  Gil gil;
  PyRef sys = PyRef::steal(PyImport_ImportModule("sys"));
  for (const char* name : {"prefix", "base_prefix", "exec_prefix", "base_exec_prefix", "executable"})
    if (std::string text = sys_text(sys.get(), name); !text.empty()) paths.push_back(std::move(text));
  PyRef path = PyRef::steal(sys ? PyObject_GetAttrString(sys.get(), "path") : nullptr);
  for (Py_ssize_t i = 0; path && PyList_Check(path.get()) && i < PyList_Size(path.get()); ++i)
    if (const char* text = PyUnicode_AsUTF8(PyList_GetItem(path.get(), i))) paths.emplace_back(text);
  PyErr_Clear();
  return paths;
}

void replace_environment(const std::vector<std::pair<std::string, std::string>>& variables) {
  Gil gil;
  PyRef os = PyRef::steal(PyImport_ImportModule("os"));
  PyRef environ_map = PyRef::steal(os ? PyObject_GetAttrString(os.get(), "environ") : nullptr);
  PyRef cleared = PyRef::steal(environ_map ? PyObject_CallMethod(environ_map.get(), "clear", nullptr) : nullptr);
  PyErr_Clear();
  ::clearenv();
  for (const auto& [name, value] : variables) {
    PyRef text = PyRef::steal(PyUnicode_DecodeFSDefault(value.c_str()));
    if (!environ_map || !text || PyMapping_SetItemString(environ_map.get(), name.c_str(), text.get()) != 0) {
      PyErr_Clear();
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
}

}  // namespace kcoral::cpython
