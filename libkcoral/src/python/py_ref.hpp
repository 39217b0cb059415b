// Owners for CPython handles, and the one checking macro of the CPython API family.
//
// PyRef owns one strong reference (move-only; Py_XDECREF on destruction). Borrowed
// references stay raw `PyObject*` and are never stored beyond the call that lends them.
// Gil holds the GIL for a scope. KCORAL_PY_CHECK turns a NULL (or -1) result into a
// PythonException carrying the Python error, the call's text and file:line; such
// exceptions stay inside the executor, which turns them into InstructionErrors.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace kcoral::python {

class PyRef {
 public:
  PyRef() = default;
  static PyRef steal(PyObject* object) { return PyRef(object); }
  static PyRef borrow(PyObject* object) {
    Py_XINCREF(object);
    return PyRef(object);
  }
  PyRef(PyRef&& other) noexcept : object_(std::exchange(other.object_, nullptr)) {}
  PyRef& operator=(PyRef&& other) noexcept {
    if (this != &other) {
      Py_XDECREF(object_);
      object_ = std::exchange(other.object_, nullptr);
    }
    return *this;
  }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  ~PyRef() { Py_XDECREF(object_); }

  [[nodiscard]] PyObject* get() const { return object_; }
  [[nodiscard]] PyObject* release() { return std::exchange(object_, nullptr); }
  explicit operator bool() const { return object_ != nullptr; }
  [[nodiscard]] PyRef copy() const { return borrow(object_); }

 private:
  explicit PyRef(PyObject* object) : object_(object) {}
  PyObject* object_ = nullptr;
};

class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;
  ~Gil() { PyGILState_Release(state_); }

 private:
  PyGILState_STATE state_;
};

// sys.modules names of uploaded modules start with this.
inline constexpr const char* kUploadedModulePrefix = "kcoral_upload_";

// The file name the executor's helper module is compiled under.
inline constexpr const char* kExecutorSupportFilename = "<kcoral executor>";

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

}  // namespace kcoral::python

// Evaluates a CPython call returning a new reference (or an int status) and throws a
// PythonException when it reports an error.
#define KCORAL_PY_CHECK(call) ::kcoral::python::check_result((call), #call, __FILE__, __LINE__)
