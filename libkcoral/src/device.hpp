// Device: what the executor needs from the hardware its programs run on.
//
// The CPU device makes numpy tensors, has no libraries and nothing to synchronize; the
// GPU device (CUDA builds) makes CUDA torch tensors, loads TVM FFI libraries, drains the
// device before the lease changes hands and watches cpu_only calls. Methods that touch
// Python are called with the GIL held and may throw python::PythonException or
// InstructionFailure. Not thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kcoral/blob.hpp"
#include "kcoral/error.hpp"
#include "kcoral/program.hpp"
#include "python/py_ref.hpp"

namespace kcoral {

// An instruction failure with a kind chosen by the code that raised it.
struct InstructionFailure {
  ErrorKind kind;
  std::string message;
  std::string traceback;
};

class Device {
 public:
  virtual ~Device() = default;
  [[nodiscard]] virtual python::PyRef make_tensor(const Blob& blob, const Upload& upload) = 0;
  [[nodiscard]] virtual python::PyRef load_library(const Blob& blob) = 0;
  [[nodiscard]] virtual python::PyRef library_function(PyObject* library, const std::string& name) = 0;
  // Waits for outstanding device work; an error here poisons the worker.
  [[nodiscard]] virtual Status synchronize() = 0;
};

// `support` is the executor's Python helper module (_kcoral_executor).
[[nodiscard]] std::unique_ptr<Device> make_cpu_device(PyObject* support);

}  // namespace kcoral
