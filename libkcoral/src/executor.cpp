// Executor: the interpreter, its helper module and the device, shared by every run.
#include "kcoral/executor.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "device.hpp"
#include "cuda_hazard.hpp"
#include "kcoral/program_builder.hpp"
#include "kcoral/read_to_end.hpp"
#include "kcoral/unique_fd.hpp"
#include "program_run.hpp"
#include "fork_scope.hpp"
#include "interpreter.hpp"

namespace kcoral {

extern const char kExecutorSupportSource[];  // executor_support.py (executor_support_source.cpp.in)

using cpython::PyRef;

struct Executor::Impl {
  ExecutorOptions options;
  PyRef support;
  std::unique_ptr<Device> device;
  std::uint64_t modules_loaded = 0;
};

namespace {

// The file name the executor's helper module is compiled under; its frames are hidden from
// the tracebacks users read.
constexpr const char* kExecutorSupportFilename = "<kcoral executor>";

// Imports the embedded helper as `_kcoral_executor`, once per interpreter.
PyRef import_support() {
  PyObject* modules = PyImport_GetModuleDict();
  if (PyObject* existing = PyDict_GetItemString(modules, "_kcoral_executor"))
    return PyRef::borrow(existing);
  PyRef code = KCORAL_PY_CHECK(
      Py_CompileString(kExecutorSupportSource, kExecutorSupportFilename, Py_file_input));
  return KCORAL_PY_CHECK(PyImport_ExecCodeModule("_kcoral_executor", code.get()));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `_kcoral_executor.preload(name, gpu)`: the outcome and the exception's text.
std::pair<PreloadedModule::Outcome, std::string> import_module(PyObject* support, const std::string& name, bool gpu) {
  PyRef answer = KCORAL_PY_CHECK(PyObject_CallMethod(support, "preload", "sO", name.c_str(), gpu ? Py_True : Py_False));
  const char* outcome = nullptr;
  const char* detail = nullptr;
  if (!PyArg_ParseTuple(answer.get(), "ss", &outcome, &detail)) cpython::throw_python_error("preload", __FILE__, __LINE__);
  using Outcome = PreloadedModule::Outcome;
  std::string_view said(outcome);
  Outcome as = said == "imported"        ? Outcome::imported
               : said == "not installed" ? Outcome::not_installed
               : said == "unsafe"        ? Outcome::unsafe
                                         : Outcome::failed;
  return {as, detail};
}

// Imports `name` in a child forked now, which reports how it went and exits: what the
// import would do to this process, without doing it here. Called with the GIL held.
Result<PreloadedModule> trial_import(PyObject* support, const std::string& name, bool gpu) {
  using Outcome = PreloadedModule::Outcome;
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return fail(ErrorKind::engine, std::string("pipe: ") + std::strerror(errno));
  UniqueFd read_end(ends[0]), write_end(ends[1]);
  auto started = std::chrono::steady_clock::now();
  cpython::ForkScope fork;
  pid_t pid = ::fork();
  if (pid == 0) {
    fork.in_child();
    std::string verdict;
    try {
      auto [outcome, detail] = import_module(support, name, gpu);
      std::optional<std::string> hazard = outcome == Outcome::imported ? cuda_hazard() : std::nullopt;
      verdict = std::to_string(static_cast<int>(hazard ? Outcome::unsafe : outcome)) + (hazard ? *hazard : detail);
    } catch (const cpython::PythonException& e) {
      verdict = std::to_string(static_cast<int>(Outcome::failed)) + e.what();
    }
    for (std::size_t at = 0; at < verdict.size();) {
      ssize_t n = ::write(write_end.get(), verdict.data() + at, verdict.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  fork.in_parent();
  if (pid < 0) return fail(ErrorKind::engine, std::string("fork: ") + std::strerror(errno));
  write_end.reset();
  std::string verdict = read_to_end(read_end.get());
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  PreloadedModule module;
  module.name = name;
  module.seconds = seconds_since(started);
  if (verdict.empty() || verdict[0] < '0' || verdict[0] > '3') {
    module.outcome = Outcome::failed;
    module.detail = WIFSIGNALED(status) ? "its trial import was killed by signal " + std::to_string(WTERMSIG(status))
                                        : "its trial import ended without a word";
    return module;
  }
  module.outcome = static_cast<Outcome>(verdict[0] - '0');
  module.detail = verdict.substr(1);
  return module;
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
  cpython::Gil gil;
  impl_->device.reset();
  impl_->support = PyRef();
}

Result<std::unique_ptr<Executor>> Executor::create(ExecutorOptions options) {
  KCORAL_TRY(cpython::start_interpreter(options.python_executable));
  auto impl = std::make_unique<Impl>();
  if (options.work_root.empty()) options.work_root = default_work_root();
  impl->options = std::move(options);
  cpython::Gil gil;
  cpython::set_error_presentation({kUploadedModulePrefix, kExecutorSupportFilename});
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
  } catch (const cpython::PythonException& e) {
    return fail(ErrorKind::engine, std::string("cannot prepare the executor: ") + e.what());
  }
  return std::unique_ptr<Executor>(new Executor(std::move(impl)));
}

ProgramResult Executor::run(const Program& program, const BlobMap& blobs, GpuLease& lease,
                            const RunOptions& options) {
  cpython::Gil gil;
  ExecutionContext context{impl_->support.get(), *impl_->device,
                           options.work_root.empty() ? impl_->options.work_root : options.work_root,
                           impl_->modules_loaded};
  return ProgramRun(context, program, blobs, lease, options).execute();
}

Status Executor::prepare_device() {
  cpython::Gil gil;
  return impl_->device->prepare();
}

void Executor::freeze_objects() {
  cpython::Gil gil;
  PyRef gc = PyRef::steal(PyImport_ImportModule("gc"));
  PyRef collected = gc ? PyRef::steal(PyObject_CallMethod(gc.get(), "collect", nullptr)) : PyRef();
  PyRef frozen = gc ? PyRef::steal(PyObject_CallMethod(gc.get(), "freeze", nullptr)) : PyRef();
  if (!frozen) PyErr_Clear();
}

Result<std::vector<PreloadedModule>> Executor::preload(const std::vector<std::string>& modules) {
  using Outcome = PreloadedModule::Outcome;
  cpython::Gil gil;
  std::vector<PreloadedModule> report;
  try {
    for (const std::string& name : modules) {
      auto module = trial_import(impl_->support.get(), name, impl_->options.gpu);
      if (!module) return std::unexpected(module.error());
      if (module->outcome == Outcome::imported) {
        auto started = std::chrono::steady_clock::now();
        auto [outcome, detail] = import_module(impl_->support.get(), name, impl_->options.gpu);
        module->seconds = seconds_since(started);
        std::optional<std::string> hazard = outcome == Outcome::unsafe ? detail : cuda_hazard();
        if (hazard)
          return fail(ErrorKind::engine, "importing " + name + " " + *hazard +
                                             " in the worker parent, though not in its trial: it must not fork now");
        if (outcome != Outcome::imported) {  // raised here, though not in its trial
          module->outcome = Outcome::failed;
          module->detail = std::move(detail);
        }
      }
      report.push_back(std::move(*module));
    }
    // With numpy, on a CPU server, ml_dtypes where installed: CPU tensor uploads of bfloat16
    // and float8 are made with it, and a module a program imports is a change a reused
    // worker's check retires it for.
    if (!impl_->options.gpu && PyDict_GetItemString(PyImport_GetModuleDict(), "numpy") != nullptr &&
        !PyRef::steal(PyImport_ImportModule("ml_dtypes")))
      PyErr_Clear();
  } catch (const cpython::PythonException& e) {
    return fail(ErrorKind::engine, std::string("cannot preload modules: ") + e.what());
  }
  return report;
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

InterpreterState Executor::interpreter_state(bool with_names) {
  cpython::Gil gil;
  InterpreterState state;
  PyRef found = PyRef::steal(
      PyObject_CallMethod(impl_->support.get(), "reuse_state", "O", with_names ? Py_True : Py_False));
  long long fingerprint = 0;
  Py_ssize_t count = 0;
  PyObject* names = nullptr;
  unsigned long long gpu_bytes = 0;
  if (!found || !PyArg_ParseTuple(found.get(), "LnOK", &fingerprint, &count, &names, &gpu_bytes) ||
      (with_names && !PyList_Check(names))) {
    PyErr_Clear();
    state.readable = false;
    return state;
  }
  state.modules_fingerprint = fingerprint;
  state.module_count = static_cast<std::size_t>(count);
  state.gpu_bytes = gpu_bytes;
  for (Py_ssize_t i = 0; with_names && i < PyList_GET_SIZE(names); ++i) {
    Py_ssize_t size = 0;
    const char* name = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(names, i), &size);
    if (name == nullptr) {
      PyErr_Clear();
      state.readable = false;
      return state;
    }
    state.modules.emplace_back(name, static_cast<std::size_t>(size));
  }
  return state;
}

std::map<std::string, std::string> Executor::versions() {
  cpython::Gil gil;
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
