// Owners for CPython handles: the bottom of libkcoral's CPython layer (libkcoral/src/cpython),
// which knows the interpreter and nothing of the executor above it.
//
// PyRef owns one strong reference (move-only; Py_XDECREF on destruction). Borrowed
// references stay raw `PyObject*` and are never stored beyond the call that lends them.
// Gil holds the GIL for a scope; GilReleased lets it go for one. BufferView holds an
// object's bytes through the buffer protocol.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstddef>
#include <span>
#include <utility>

namespace kcoral::cpython {

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

// Lets other Python threads run for a scope of C++ work that touches no Python object.
// Entered with the GIL held.
class GilReleased {
 public:
  GilReleased() : state_(PyEval_SaveThread()) {}
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;
  ~GilReleased() { PyEval_RestoreThread(state_); }

 private:
  PyThreadState* state_;
};

// A view of an object's bytes (PyObject_GetBuffer), released when destroyed. Not movable:
// the exporter may keep the view's address.
class BufferView {
 public:
  BufferView() = default;
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  ~BufferView() {
    if (held_) PyBuffer_Release(&view_);
  }

  // Takes `object`'s buffer (PyBUF_* `flags`): 0, or -1 with the Python error set
  // (for KCORAL_PY_CHECK). Once per view.
  [[nodiscard]] int acquire(PyObject* object, int flags) {
    if (PyObject_GetBuffer(object, &view_, flags) != 0) return -1;
    held_ = true;
    return 0;
  }
  [[nodiscard]] std::span<const std::byte> bytes() const {
    if (!held_) return {};
    return {static_cast<const std::byte*>(view_.buf), static_cast<std::size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

}  // namespace kcoral::cpython

