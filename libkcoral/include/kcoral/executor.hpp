// Executor: runs a Program in this process's embedded CPython interpreter.
//
// The executor starts CPython when the process does not run it yet (C++ harnesses, the
// server's workers) and uses the running interpreter otherwise (the kcoral Python
// module). Each run gets a fresh working directory, fd-level capture of stdout/stderr,
// and lease placement per docs/protocol.md; a failure stops the program and keeps earlier
// returns. State a program leaves in the interpreter (imports, monkeypatches) is not
// undone here: the server gives every program a freshly forked worker for that.
// One program at a time per process; run() takes the GIL itself.
//
//   auto executor = kcoral::Executor::create({});  // Result<std::unique_ptr<Executor>>
//   kcoral::NoGpuLease lease;
//   kcoral::ProgramResult result = (*executor)->run(program, blobs, lease, {});
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kcoral/blob_store.hpp"
#include "kcoral/error.hpp"
#include "kcoral/gpu_lease.hpp"
#include "kcoral/program.hpp"
#include "kcoral/program_result.hpp"

namespace kcoral {

struct ExecutorOptions {
  // The Python whose environment to embed (sys.executable); one that cannot run, or empty:
  // $KCORAL_PYTHON, else python3 on PATH. It must be of the Python version the library was
  // built with. Ignored when Python already runs (the native module, the worker parent).
  std::string python_executable;
  // Where per-program working directories are made; empty: $TMPDIR, else /tmp.
  std::string work_root;
  // Modules imported once when the executor is made, so programs do not pay for them
  // (a worker parent imports numpy, or torch, before it forks per-program children).
  std::vector<std::string> preload_modules;
  // Run programs on a GPU: CUDA torch tensors, TVM FFI libraries, lease-aware device
  // draining, watched cpu_only calls. Needs a build with CUDA.
  bool gpu = false;
};

// What Executor::preload did with one module.
struct PreloadedModule {
  enum class Outcome { imported, not_installed, failed, unsafe };
  std::string name;
  Outcome outcome = Outcome::imported;
  std::string detail;  // failed: the exception; unsafe: what the import did
  double seconds = 0;  // the import in this process (imported), else the trial's
};

// What a program may leave in the interpreter for the next one run by the same process.
struct InterpreterState {
  // sys.modules' keys as a fingerprint (the hash of their set, for this process): whether
  // they changed is found in about 0.1 ms, where listing 8,000 names sorted takes 1 ms.
  std::int64_t modules_fingerprint = 0;
  std::size_t module_count = 0;
  std::vector<std::string> modules;  // the names in sys.modules, sorted; only when asked
  std::uint64_t gpu_bytes = 0;       // GPU memory torch's allocator has given out (live tensors)
  bool readable = true;              // false: the interpreter could not say (a program broke it)

  [[nodiscard]] bool same_modules(const InterpreterState& other) const {
    return modules_fingerprint == other.modules_fingerprint && module_count == other.module_count;
  }
};
struct RunOptions {
  std::uint64_t output_limit_bytes = 1u << 20;  // per stream; 0 turns capture off
  std::uint64_t max_returned_bytes = 256u << 20;  // all returned values together, text and binary data
  // Called before each instruction with its index (the server attributes crashes by it).
  std::function<void(std::size_t)> on_instruction;
  // Overrides ExecutorOptions::work_root for this run.
  std::string work_root;
  // Called from inside the CUDA call when a cpu_only function uses the GPU (the server
  // uses it to note whose program the GPU was leased to at that moment).
  std::function<void(const GpuAccessDetail&)> on_gpu_access;
};

class Executor {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Executor>> create(ExecutorOptions options);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  ~Executor();

  // Runs the program; `blobs` must hold every blob it references.
  [[nodiscard]] ProgramResult run(const Program& program, const BlobMap& blobs, GpuLease& lease,
                                  const RunOptions& options);

  // What the interpreter's environment has installed: python, numpy, torch, … (read
  // from package metadata, nothing imported).
  [[nodiscard]] std::map<std::string, std::string> versions();

  // Makes the device usable in this process (on a GPU: its CUDA context, and torch's),
  // before the first program. A process that forks children calls it in each child.
  [[nodiscard]] Status prepare_device();

  // Collects garbage and moves every object alive now out of the collector's reach
  // (gc.freeze), so that later collections skip them: in a process that forks one child
  // per program, collections in a child then do not write to, and so copy, the parent's
  // memory pages; in one that runs several programs, a collection between programs walks
  // only what the programs made (a worker with torch, Triton and TVM made ready holds
  // hundreds of thousands of objects).
  void freeze_objects();
  // For such a process, before it forks: imports each module in order that a trial child,
  // forked just before, imported without raising and without leaving the process unsafe
  // to fork (more than one thread, a CUDA device file open or mapped: CUDA does not survive
  // fork). A module that is not installed, raises, or is unsafe is left out. The process
  // is checked again after each import; an error if it became unsafe all the same (then
  // it must not fork).
  [[nodiscard]] Result<std::vector<PreloadedModule>> preload(const std::vector<std::string>& modules);
  // Runs a small program (a module, a call, a return, captured output) in `work_root`,
  // so that what every program touches first is already touched: in a freshly forked
  // child, before its first real program arrives.
  void warm_up(const std::string& work_root);
  // This interpreter's state as a program may change it (see InterpreterState): a process
  // that runs several programs compares it between them. `with_names`: the module names
  // too, to say what changed.
  [[nodiscard]] InterpreterState interpreter_state(bool with_names);

 private:
  struct Impl;
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kcoral
