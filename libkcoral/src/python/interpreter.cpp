// CPython start-up for embedding executables (the worker, C++ tests and examples).
#include "interpreter.hpp"

#include "native_module.hpp"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <unistd.h>

#include <cstdlib>
#include <mutex>

namespace kcoral::python {
namespace {

PyObject* native_module_init() { return create_native_module(); }

}  // namespace

Status ensure_interpreter(const std::string& python_executable) {
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
  // kcoral._native as a built-in: found before any kcoral/_native*.so on sys.path.
  PyImport_AppendInittab("kcoral._native", &native_module_init);
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

}  // namespace kcoral::python
