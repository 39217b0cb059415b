// Device: what the executor needs from the hardware its programs run on.
//
// The CPU device makes numpy tensors, has no libraries and nothing to synchronize; the
// GPU device (CUDA builds) makes CUDA torch tensors, loads TVM FFI libraries, drains the
// device before the lease changes hands and watches cpu_only calls. Methods that touch
// Python are called with the GIL held and may throw cpython::PythonException or
// InstructionFailure. Not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kcoral/blob.hpp"
#include "kcoral/error.hpp"
#include "kcoral/program.hpp"
#include "kcoral/program_result.hpp"
#include "py_error.hpp"

namespace kcoral {

// An instruction failure with a kind chosen by the code that raised it.
struct InstructionFailure {
  ErrorKind kind;
  std::string message;
  std::string traceback;
  std::optional<GpuAccessDetail> gpu_access = std::nullopt;
};

// Watches one cpu_only call; verdict() says whether it used the GPU after all.
class CpuOnlyWatch {
 public:
  virtual ~CpuOnlyWatch() = default;
  [[nodiscard]] virtual std::optional<InstructionFailure> verdict() const = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  // Makes the device usable in this process (a CUDA context); once, before programs.
  [[nodiscard]] virtual Status prepare() { return {}; }
  [[nodiscard]] virtual cpython::PyRef make_tensor(const Blob& blob, const Upload& upload) = 0;
  // Loads the shared library written at `path`.
  [[nodiscard]] virtual cpython::PyRef load_library(const std::string& path) = 0;
  [[nodiscard]] virtual cpython::PyRef library_function(PyObject* library, const std::string& name) = 0;
  // Waits for outstanding device work; an error here poisons the worker.
  [[nodiscard]] virtual Status synchronize() = 0;
  // Takes (and clears) an error CUDA holds for the next caller, as from a kernel launch
  // nobody checked; nullopt when there is none.
  [[nodiscard]] virtual std::optional<std::string> take_last_error() { return std::nullopt; }
  // Starts watching a cpu_only call; nullptr where there is no GPU to protect.
  [[nodiscard]] virtual std::unique_ptr<CpuOnlyWatch> watch_cpu_only(
      const std::string& /*uploaded_code_dir*/, std::function<void(const GpuAccessDetail&)> /*on_violation*/) {
    return nullptr;
  }
};

// A private, writable buffer with a blob's bytes, for a tensor of `item_size`-byte
// elements, and where in it they start. A copy-on-write mapping of the pages that hold
// them where the first byte lies on an element boundary of its page (so the array over it
// is aligned), else a copy; None when the blob is empty. `mmap_module`: Python's mmap.
struct PrivateBuffer {
  cpython::PyRef buffer;
  std::size_t offset = 0;
};
[[nodiscard]] PrivateBuffer private_buffer(const Blob& blob, std::size_t item_size, PyObject* mmap_module);

// `support` is the executor's Python helper module (_kcoral_executor).
[[nodiscard]] std::unique_ptr<Device> make_cpu_device(PyObject* support);
// Fails (unavailable) in a build without CUDA, or without a usable GPU.
[[nodiscard]] Result<std::unique_ptr<Device>> make_gpu_device(PyObject* support);

}  // namespace kcoral
