// The GPU device: CUDA torch tensors with one host-to-device copy, TVM FFI libraries,
// draining through the driver API, and CUPTI watches over cpu_only calls.
#include <dlfcn.h>

#include "device.hpp"
#include "kcoral/benchmark.hpp"
#include "gpu/cuda_api.hpp"
#include "gpu/gpu_access_guard.hpp"

namespace kcoral {
namespace {

using cpython::PyRef;

class GuardWatch final : public CpuOnlyWatch {
 public:
  explicit GuardWatch(std::unique_ptr<gpu::GpuAccessGuard> guard) : guard_(std::move(guard)) {}
  std::optional<InstructionFailure> verdict() const override {
    auto record = guard_->violation();
    if (!record) return std::nullopt;
    return InstructionFailure{ErrorKind::gpu_access,
                              "the cpu_only function called " + record->detail.cuda_call + " at " +
                                  record->detail.location + ", using the GPU without holding it",
                              record->stack, record->detail};
  }

 private:
  std::unique_ptr<gpu::GpuAccessGuard> guard_;
};

class GpuDevice final : public Device {
 public:
  GpuDevice(PyObject* support, const gpu::DriverApi& cuda) : support_(PyRef::borrow(support)), cuda_(cuda) {}

  PyRef make_tensor(const Blob& blob, const Upload& upload) override {
    PyRef shape = KCORAL_PY_CHECK(PyList_New(0));
    for (std::int64_t extent : upload.shape)
      KCORAL_PY_CHECK(PyList_Append(shape.get(), PyRef::steal(PyLong_FromLongLong(extent)).get()));
    std::string dtype(to_wire(upload.dtype));
    PyRef tensor = KCORAL_PY_CHECK(PyObject_CallMethod(support_.get(), "empty_cuda_tensor", "s#O", dtype.data(),
                                                       static_cast<Py_ssize_t>(dtype.size()), shape.get()));
    if (blob.size() == 0) return tensor;
    // Straight from the upload's mapping, which outlives the call: nothing of the upload
    // (a Python buffer, its descriptor) is left for torch to hold after the program.
    PyRef address = KCORAL_PY_CHECK(PyObject_CallMethod(tensor.get(), "data_ptr", nullptr));
    PyRef bytes = KCORAL_PY_CHECK(PyObject_GetAttrString(tensor.get(), "nbytes"));
    unsigned long long pointer = PyLong_AsUnsignedLongLong(address.get());
    if (PyErr_Occurred() || PyLong_AsSize_t(bytes.get()) != blob.size()) {
      PyErr_Clear();
      throw InstructionFailure{ErrorKind::engine, "the CUDA tensor for an upload is not its size", ""};
    }
    if (CUresult copied = cuda_.cuMemcpyHtoD(static_cast<CUdeviceptr>(pointer), blob.view().data(), blob.size());
        copied != CUDA_SUCCESS)
      throw InstructionFailure{ErrorKind::runtime, gpu::describe(copied, "cuMemcpyHtoD"), ""};
    return tensor;
  }

  PyRef load_library(const std::string& path) override {
    return KCORAL_PY_CHECK(PyObject_CallMethod(support_.get(), "load_library", "s", path.c_str()));
  }

  PyRef library_function(PyObject* library, const std::string& name) override {
    return KCORAL_PY_CHECK(PyObject_CallMethod(support_.get(), "library_function", "Os", library, name.c_str()));
  }

  Status prepare() override {
    // The contexts the frameworks (torch, triton, TVM) share: each visible device's primary
    // one (the worker's GPUs: one, or a program's several), retained once for the life of
    // this device; the first is current.
    if (contexts_.empty()) {
      KCORAL_CU_TRY(cuda_.cuInit(0));
      int count = 0;
      KCORAL_CU_TRY(cuda_.cuDeviceGetCount(&count));
      if (count == 0) return fail(ErrorKind::unavailable, "CUDA sees no device in this worker");
      std::vector<gpu::PrimaryContext> contexts;
      for (int ordinal = 0; ordinal < count; ++ordinal) {
        auto context = gpu::PrimaryContext::retain(cuda_, ordinal);
        if (!context) return std::unexpected(context.error());
        contexts.push_back(std::move(*context));
      }
      contexts_ = std::move(contexts);
    }
    KCORAL_CU_TRY(cuda_.cuCtxSetCurrent(contexts_.front().get()));
    try {
      KCORAL_PY_CHECK(PyObject_CallMethod(support_.get(), "prepare_cuda", nullptr));
    } catch (const cpython::PythonException& e) {
      return fail(ErrorKind::engine, std::string("cannot prepare CUDA in Python: ") + e.what());
    }
    gpu::prepare_benchmark();
    return {};
  }

  Status synchronize() override {
    CUcontext context = nullptr;
    CUresult current = cuda_.cuCtxGetCurrent(&context);
    if (current == CUDA_ERROR_NOT_INITIALIZED) return {};  // nothing ever used CUDA here
    if (current != CUDA_SUCCESS) return fail(ErrorKind::runtime, gpu::describe(current, "cuCtxGetCurrent"));
    if (context == nullptr) return {};
    KCORAL_CU_TRY(cuda_.cuCtxSynchronize());
    // A program on several GPUs: the other devices drain too, before its lease goes.
    for (const gpu::PrimaryContext& other : contexts_) {
      if (other.get() == context) continue;
      KCORAL_CU_TRY(cuda_.cuCtxSetCurrent(other.get()));
      CUresult synced = cuda_.cuCtxSynchronize();
      KCORAL_CU_TRY(cuda_.cuCtxSetCurrent(context));
      if (synced != CUDA_SUCCESS) return fail(ErrorKind::runtime, gpu::describe(synced, "cuCtxSynchronize"));
    }
    return {};
  }

  std::optional<std::string> take_last_error() override {
    // The runtime keeps a launch error for the next runtime call of the thread; read it
    // through whichever libcudart the program's frameworks loaded, if any.
    static auto get_last_error = reinterpret_cast<int (*)()>(runtime_symbol("cudaGetLastError"));
    static auto error_name = reinterpret_cast<const char* (*)(int)>(runtime_symbol("cudaGetErrorName"));
    if (get_last_error == nullptr) return std::nullopt;
    int error = get_last_error();
    if (error == 0) return std::nullopt;
    return std::string("CUDA reports an unchecked error: ") + (error_name ? error_name(error) : "unknown");
  }

  std::unique_ptr<CpuOnlyWatch> watch_cpu_only(const std::string& uploaded_code_dir,
                                              std::function<void(const GpuAccessDetail&)> on_violation) override {
    auto guard = gpu::GpuAccessGuard::watch(uploaded_code_dir, std::move(on_violation));
    // Best effort: without CUPTI (or with its one subscriber slot taken) the call runs unwatched.
    if (!guard) return nullptr;
    return std::make_unique<GuardWatch>(std::move(*guard));
  }

 private:
  static void* runtime_symbol(const char* name) {
    for (const char* library : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
      if (void* handle = ::dlopen(library, RTLD_NOW | RTLD_NOLOAD)) return ::dlsym(handle, name);
    }
    return nullptr;
  }

  PyRef support_;
  const gpu::DriverApi& cuda_;
  std::vector<gpu::PrimaryContext> contexts_;  // by device ordinal, from the first prepare()
};

}  // namespace

Result<std::unique_ptr<Device>> make_gpu_device(PyObject* support) {
  // No cuInit here: a worker parent makes its device before forking children, and CUDA
  // does not survive fork; each child calls prepare().
  const gpu::DriverApi* cuda = gpu::driver_api();
  if (cuda == nullptr) return fail(ErrorKind::unavailable, gpu::load_error());
  return std::unique_ptr<Device>(std::make_unique<GpuDevice>(support, *cuda));
}

}  // namespace kcoral
