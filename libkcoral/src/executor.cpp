// Executor: the interpreter, its helper module and the device, shared by every run.
#include "kcoral/executor.hpp"

#include <cstdlib>

#include "device.hpp"
#include "kcoral/program_builder.hpp"
#include "program_run.hpp"
#include "python/interpreter.hpp"

namespace kcoral {
namespace python {
extern const char kExecutorSupportSource[];
}

using python::PyRef;

struct Executor::Impl {
  ExecutorOptions options;
  PyRef support;
  std::unique_ptr<Device> device;
  std::uint64_t modules_loaded = 0;
};

namespace {

// Imports the embedded helper as `_kcoral_executor`, once per interpreter.
PyRef import_support() {
  PyObject* modules = PyImport_GetModuleDict();
  if (PyObject* existing = PyDict_GetItemString(modules, "_kcoral_executor"))
    return PyRef::borrow(existing);
  PyRef code = KCORAL_PY_CHECK(
      Py_CompileString(python::kExecutorSupportSource, python::kExecutorSupportFilename, Py_file_input));
  return KCORAL_PY_CHECK(PyImport_ExecCodeModule("_kcoral_executor", code.get()));
}

std::string default_work_root() {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp");
}

}  // namespace

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() {
  if (!impl_) return;
  if (!Py_IsInitialized()) {
    // The interpreter is gone (process exit): its objects went with it, so our
    // references must not be released into it.
    (void)impl_->support.release();
    (void)impl_->device.release();
    return;
  }
  python::Gil gil;
  impl_->device.reset();
  impl_->support = PyRef();
}

Result<std::unique_ptr<Executor>> Executor::create(ExecutorOptions options) {
  if (auto status = python::ensure_interpreter(options.python_executable); !status)
    return std::unexpected(status.error());
  auto impl = std::make_unique<Impl>();
  if (options.work_root.empty()) options.work_root = default_work_root();
  impl->options = std::move(options);
  python::Gil gil;
  try {
    impl->support = import_support();
    if (impl->options.gpu) {
      auto device = make_gpu_device(impl->support.get());
      if (!device) return std::unexpected(device.error());
      impl->device = std::move(*device);
    } else {
      impl->device = make_cpu_device(impl->support.get());
    }
    // Best effort: a module that is not installed fails the programs that use it, later.
    for (const std::string& name : impl->options.preload_modules) {
      PyRef module = PyRef::steal(PyImport_ImportModule(name.c_str()));
      if (!module) PyErr_Clear();
    }
  } catch (const python::PythonException& e) {
    return fail(ErrorKind::engine, std::string("cannot prepare the executor: ") + e.what());
  }
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

ProgramResult Executor::run(const Program& program, const BlobMap& blobs, GpuLease& lease,
                            const RunOptions& options) {
  python::Gil gil;
  ExecutionContext context{impl_->support.get(), *impl_->device,
                           options.work_root.empty() ? impl_->options.work_root : options.work_root,
                           impl_->modules_loaded};
  return ProgramRun(context, program, blobs, lease, options).execute();
}

Status Executor::prepare_device() {
  python::Gil gil;
  return impl_->device->prepare();
}

void Executor::prepare_for_fork() {
  python::Gil gil;
  PyRef gc = PyRef::steal(PyImport_ImportModule("gc"));
  PyRef collected = gc ? PyRef::steal(PyObject_CallMethod(gc.get(), "collect", nullptr)) : PyRef();
  PyRef frozen = gc ? PyRef::steal(PyObject_CallMethod(gc.get(), "freeze", nullptr)) : PyRef();
  if (!frozen) PyErr_Clear();
}

void Executor::warm_up(const std::string& work_root) {
  ProgramBuilder builder;
  Ref module = builder.upload_module(
      "warm_up", "def run(value):\n    print(value)\n    return {'value': [value, 0.5, 'text', None, True]}\n");
  Ref function = builder.get_function("run", module, "run");
  builder.return_value("result", builder.run("result", function, {json_literal("1")}));
  auto built = builder.build();
  if (!built) return;
  NoGpuLease lease;
  RunOptions options;
  options.work_root = work_root;
  (void)run(built->program, built->blobs, lease, options);
}

std::map<std::string, std::string> Executor::versions() {
  python::Gil gil;
  std::map<std::string, std::string> out;
  PyRef found = PyRef::steal(PyObject_CallMethod(impl_->support.get(), "versions", nullptr));
  if (!found) {
    PyErr_Clear();
    return out;
  }
  PyObject *key = nullptr, *value = nullptr;
  Py_ssize_t position = 0;
  while (PyDict_Next(found.get(), &position, &key, &value)) {
    const char* k = PyUnicode_AsUTF8(key);
    const char* v = PyUnicode_AsUTF8(value);
    if (k != nullptr && v != nullptr) out.emplace(k, v);
  }
  PyErr_Clear();
  return out;
}

}  // namespace kcoral
