// Taking Python errors out of the interpreter, with their formatted traceback.
#include "py_error.hpp"

namespace kcoral::cpython {
namespace {

ErrorPresentation& presentation() {
  static ErrorPresentation shown;
  return shown;
}

std::string to_utf8(PyObject* text) {
  if (text == nullptr || !PyUnicode_Check(text)) return {};
  PyRef bytes = PyRef::steal(PyUnicode_AsEncodedString(text, "utf-8", "replace"));
  if (!bytes) {
    PyErr_Clear();
    return {};
  }
  return std::string(PyBytes_AS_STRING(bytes.get()), PyBytes_GET_SIZE(bytes.get()));
}

std::string str_of(PyObject* object) {
  PyRef text = PyRef::steal(PyObject_Str(object));
  if (!text) {
    PyErr_Clear();
    return "<unprintable>";
  }
  return to_utf8(text.get());
}

std::string type_name(PyObject* type) {
  auto* t = reinterpret_cast<PyTypeObject*>(type);
  PyRef module = PyRef::steal(PyObject_GetAttrString(type, "__module__"));
  if (!module) PyErr_Clear();
  std::string module_name = module ? to_utf8(module.get()) : "";
  std::string name = t->tp_name;
  std::size_t dot = name.rfind('.');
  if (dot != std::string::npos) name = name.substr(dot + 1);
  // Classes of the embedder's local modules go by their own name: the module's is its, not the user's.
  const std::string& local = presentation().local_module_prefix;
  if (module_name.empty() || module_name == "builtins" || (!local.empty() && module_name.starts_with(local)))
    return name;
  return module_name + "." + name;
}

// Drops the leading traceback entries of the embedder's hidden file, so a traceback starts
// in the user's code.
void skip_hidden_frames(PyObject* exception) {
  const std::string& hidden = presentation().hidden_frames_file;
  if (hidden.empty()) return;
  PyRef traceback = PyRef::steal(PyException_GetTraceback(exception));
  PyRef first = traceback.copy();
  while (first) {
    PyRef frame = PyRef::steal(PyObject_GetAttrString(first.get(), "tb_frame"));
    PyRef code = frame ? PyRef::steal(PyObject_GetAttrString(frame.get(), "f_code")) : PyRef();
    PyRef file = code ? PyRef::steal(PyObject_GetAttrString(code.get(), "co_filename")) : PyRef();
    if (!file || to_utf8(file.get()) != hidden) break;
    first = PyRef::steal(PyObject_GetAttrString(first.get(), "tb_next"));
    if (first.get() == Py_None) first = PyRef();
  }
  PyErr_Clear();
  if (first.get() != traceback.get()) PyException_SetTraceback(exception, first ? first.get() : Py_None);
}

std::string format_traceback(PyObject* exception) {
  skip_hidden_frames(exception);
  PyRef module = PyRef::steal(PyImport_ImportModule("traceback"));
  PyRef lines = module ? PyRef::steal(PyObject_CallMethod(module.get(), "format_exception", "O",
                                                          exception))
                       : PyRef();
  PyRef empty = PyRef::steal(PyUnicode_FromString(""));
  PyRef joined = lines ? PyRef::steal(PyUnicode_Join(empty.get(), lines.get())) : PyRef();
  if (!joined) {
    PyErr_Clear();
    return {};
  }
  return to_utf8(joined.get());
}

}  // namespace

void set_error_presentation(ErrorPresentation shown) {
  presentation() = std::move(shown);
  // format_traceback's module, imported now rather than by the first program that fails:
  // a module a program imports is a change a reused worker's check retires it for.
  if (!PyRef::steal(PyImport_ImportModule("traceback"))) PyErr_Clear();
}

std::string PythonError::summary() const {
  return message.empty() ? type_name : type_name + ": " + message;
}

PythonError fetch_python_error() {
  PythonError error;
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* raw = PyErr_GetRaisedException();
#else
  PyObject *raw_type = nullptr, *raw = nullptr, *raw_traceback = nullptr;
  PyErr_Fetch(&raw_type, &raw, &raw_traceback);
  PyErr_NormalizeException(&raw_type, &raw, &raw_traceback);
  if (raw != nullptr && raw_traceback != nullptr) PyException_SetTraceback(raw, raw_traceback);
  Py_XDECREF(raw_type);
  Py_XDECREF(raw_traceback);
#endif
  if (raw == nullptr) {
    error.type_name = "SystemError";
    error.message = "a Python call failed without setting an exception";
    return error;
  }
  PyRef exception = PyRef::steal(raw);
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(exception.get()));
  error.type_name = type_name(type);
  error.message = str_of(exception.get());
  error.is_assertion = PyErr_GivenExceptionMatches(type, PyExc_AssertionError) != 0;
  error.is_system_exit = PyErr_GivenExceptionMatches(type, PyExc_SystemExit) != 0;
  PyRef declared = PyRef::steal(PyObject_GetAttrString(exception.get(), "kcoral_error_kind"));
  if (declared) error.declared_kind = to_utf8(declared.get());
  else PyErr_Clear();
  error.traceback = format_traceback(exception.get());
  return error;
}

PythonException::PythonException(PythonError error, const char* call, const char* file, int line)
    : std::runtime_error(error.summary() + " (in " + call + " at " + file + ":" +
                         std::to_string(line) + ")"),
      error_(std::move(error)) {}

void throw_python_error(const char* call, const char* file, int line) {
  throw PythonException(fetch_python_error(), call, file, line);
}

}  // namespace kcoral::cpython
