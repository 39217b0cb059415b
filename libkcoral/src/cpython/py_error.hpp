// Python errors as C++ values: taken out of the interpreter's error state with their
// formatted traceback, and thrown by the one checking macro of the CPython API family.
//
// KCORAL_PY_CHECK turns a NULL (or -1) result into a PythonException carrying the Python
// error, the call's text and file:line. The code that embeds the interpreter may hide its
// own machinery from what users read (ErrorPresentation): the executor hides its helper
// module's frames and the names it gives uploaded modules.
#pragma once

#include <stdexcept>
#include <string>

#include "py_ref.hpp"

namespace kcoral::cpython {

// What fetch_python_error leaves out. Set once, before the first error is read, with the
// GIL held (it imports the traceback module the errors are formatted with).
struct ErrorPresentation {
  // Classes of modules whose names start with this go by their own name alone.
  std::string local_module_prefix;
  // Leading traceback entries of code compiled under this file name are dropped.
  std::string hidden_frames_file;
};
void set_error_presentation(ErrorPresentation presentation);

// A Python exception taken out of the interpreter's error state.
struct PythonError {
  std::string type_name;  // qualified for non-builtins: "torch.OutOfMemoryError"
  std::string message;    // str(exception)
  std::string traceback;  // traceback.format_exception(...), joined
  bool is_assertion = false;
  bool is_system_exit = false;
  // An exception may name its own error kind with a `kcoral_error_kind` attribute (as
  // kcoral.builtins' Unavailable does); empty when it does not.
  std::string declared_kind;
  // "<ExceptionType>: <message>", or the type alone when the message is empty.
  [[nodiscard]] std::string summary() const;
};

// Fetches and clears the current Python error. Must be called with an error set.
[[nodiscard]] PythonError fetch_python_error();

class PythonException : public std::runtime_error {
 public:
  PythonException(PythonError error, const char* call, const char* file, int line);
  [[nodiscard]] const PythonError& error() const { return error_; }

 private:
  PythonError error_;
};

[[noreturn]] void throw_python_error(const char* call, const char* file, int line);

inline PyRef check_result(PyObject* result, const char* call, const char* file, int line) {
  if (result == nullptr) throw_python_error(call, file, line);
  return PyRef::steal(result);
}
inline int check_result(int result, const char* call, const char* file, int line) {
  if (result == -1 && PyErr_Occurred()) throw_python_error(call, file, line);
  return result;
}

}  // namespace kcoral::cpython

// Evaluates a CPython call returning a new reference (or an int status) and throws a
// PythonException when it reports an error.
#define KCORAL_PY_CHECK(call) ::kcoral::cpython::check_result((call), #call, __FILE__, __LINE__)
