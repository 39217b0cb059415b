// The CPU device: tensors are numpy arrays over a private copy-on-write mapping of the
// uploaded blob where it is aligned for them (private_buffer), so uploads are not copied
// and programs may still write to them.
#include <sys/mman.h>
#include <unistd.h>

#include "device.hpp"

namespace kcoral {
namespace {

using cpython::PyRef;

class CpuDevice final : public Device {
 public:
  // mmap is imported here, with the executor, not by the first program with an aligned
  // tensor: a module a program imports is a change a reused worker's check retires it for.
  explicit CpuDevice(PyObject* support)
      : support_(PyRef::borrow(support)), mmap_(KCORAL_PY_CHECK(PyImport_ImportModule("mmap"))) {}

  PyRef make_tensor(const Blob& blob, const Upload& upload) override {
    PyRef shape = KCORAL_PY_CHECK(PyList_New(0));
    for (std::int64_t extent : upload.shape)
      KCORAL_PY_CHECK(PyList_Append(shape.get(), PyRef::steal(PyLong_FromLongLong(extent)).get()));
    PrivateBuffer buffer = private_buffer(blob, item_size(upload.dtype), mmap_.get());
    std::string dtype(to_wire(upload.dtype));
    return KCORAL_PY_CHECK(PyObject_CallMethod(support_.get(), "make_tensor", "Os#On", buffer.buffer.get(),
                                               dtype.data(), static_cast<Py_ssize_t>(dtype.size()), shape.get(),
                                               static_cast<Py_ssize_t>(buffer.offset)));
  }

  PyRef load_library(const std::string&) override {
    throw InstructionFailure{ErrorKind::unavailable,
                             "library uploads need a GPU server; this server runs on the CPU", ""};
  }

  PyRef library_function(PyObject*, const std::string&) override {
    throw InstructionFailure{ErrorKind::unavailable, "libraries are not available on a CPU server", ""};
  }

  Status synchronize() override { return {}; }

 private:
  PyRef support_;
  PyRef mmap_;
};

}  // namespace

PrivateBuffer private_buffer(const Blob& blob, std::size_t item_size, PyObject* mmap_module) {
  if (blob.size() == 0) return {PyRef::borrow(Py_None), 0};
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::size_t into_page = blob.offset() % page;
  if (item_size == 0 || into_page % item_size != 0)
    return {KCORAL_PY_CHECK(PyByteArray_FromStringAndSize(blob.view().data(), static_cast<Py_ssize_t>(blob.size()))),
            0};
  // mmap.mmap(fd, length, MAP_PRIVATE, PROT_READ | PROT_WRITE, ACCESS_DEFAULT, offset) from
  // the blob's page: writes stay in this process.
  return {KCORAL_PY_CHECK(PyObject_CallMethod(mmap_module, "mmap", "iniiiL", blob.fd(),
                                              static_cast<Py_ssize_t>(into_page + blob.size()), MAP_PRIVATE,
                                              PROT_READ | PROT_WRITE, 0,
                                              static_cast<long long>(blob.offset() - into_page))),
          into_page};
}

std::unique_ptr<Device> make_cpu_device(PyObject* support) {
  return std::make_unique<CpuDevice>(support);
}

#ifndef KCORAL_HAVE_CUDA
Result<std::unique_ptr<Device>> make_gpu_device(PyObject*) {
  return fail(ErrorKind::unavailable, "this build of kcoral has no GPU support (CUDA was not found when it was built)");
}
#endif

}  // namespace kcoral
