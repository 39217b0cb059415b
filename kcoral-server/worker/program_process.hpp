// A worker process: prepares itself, then runs the programs the front sends, one at a
// time (one, unless the server reuses workers).
#pragma once

#include <cstddef>
#include <string>

#include "courier.hpp"
#include "kcoral/executor.hpp"

namespace kcoral {

struct ProgramProcessOptions {
  std::string work_root;     // programs' working directories go below it
  bool gpu = false;          // make a CUDA context (under the front's init lease) before ready
  std::size_t programs = 1;  // programs to run before exiting: 1 keeps every program fresh
  // Between programs, retire unless the worker's state is back to its baseline
  // (reuse_baseline.hpp); off: reuse in full trust.
  bool check_reuse = true;
  // Its CUDA contexts have one hardware queue: benchmark() refuses calls whose work ran on
  // several streams, and the result says so (kcoral/benchmark.hpp), for the front to run
  // the program again on a worker of CUDA's default queues.
  bool refuse_multi_stream = false;
  // Run the warm-up program before the first Ready (Fork::warm_up).
  bool warm_up = true;
};

// Warms up when asked (and on a GPU makes its context), announces readiness, then for each program:
// receives blobs and the program through `courier`, runs it, kills what it left running
// and sends the result, saying whether it takes another and, if not before its count
// ran out, why. Returns the process exit code.
[[nodiscard]] int serve_programs(Executor& executor, Courier& courier, const ProgramProcessOptions& options);

}  // namespace kcoral
