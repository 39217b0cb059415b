// The extension-module home of kcoral._native: its functions (native_module.cpp), and
// worker_main, the server's worker parent (kcoral-server/worker/worker_parent.hpp), which
// kcoral-server starts under the Python its workers use, so that they run under that
// interpreter, whichever it is.
#include <Python.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kcoral/native_module.hpp"
#include "worker_parent.hpp"

namespace {

// worker_main(arguments: list[str]) -> NoReturn: runs the worker parent with the front's
// flags and ends the process with its exit code, as a program of its own would: no
// return to the interpreter, whose shutdown would wait on what the workers' modules left.
PyObject* worker_main(PyObject*, PyObject* list) {
  if (!PyList_Check(list)) {
    PyErr_SetString(PyExc_TypeError, "worker_main takes the list of the front's flags");
    return nullptr;
  }
  std::vector<std::string> arguments;
  for (Py_ssize_t i = 0; i < PyList_Size(list); ++i) {
    const char* text = PyUnicode_AsUTF8(PyList_GetItem(list, i));
    if (text == nullptr) return nullptr;
    arguments.emplace_back(text);
  }
  // As an embedding program leaves them (install_signal_handlers = 0): the worker parent
  // reads SIGINT and SIGTERM from a signalfd, and programs get the default dispositions.
  for (int signal : {SIGINT, SIGPIPE, SIGXFSZ}) std::signal(signal, SIG_DFL);
  PyEval_SaveThread();  // the worker parent takes the GIL where it needs it
  int code = kcoral::run_worker_parent(arguments);
  std::fflush(nullptr);
  std::exit(code);
}

PyMethodDef kWorkerMethods[] = {
    {"worker_main", worker_main, METH_O,
     "worker_main(arguments): the worker parent of kcoral-server (started by it, not by hand)"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

PyMODINIT_FUNC PyInit__native() {
  PyObject* module = kcoral::create_native_module();
  if (module != nullptr && PyModule_AddFunctions(module, kWorkerMethods) != 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
