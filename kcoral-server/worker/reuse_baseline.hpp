// ReuseBaseline: what a worker that runs several programs of one tenant must find as it
// was, between programs, to take the next one (kcoral-server --reuse-check state).
//
// Captured once the worker is ready, before its first program: its threads, its open
// descriptors (number, and the file each refers to), its environment (the C library's,
// which os.environ mirrors), the interpreter's imported modules and the GPU memory torch
// has given out.
// After each program the worker captures it again; any difference retires the worker
// (the reason says which). Child processes are checked apart: none may outlive a program.
//
// A hygiene check, not a wall: the program runs in this very process and could forge what
// it reads. Reuse is only ever within one tenant, so a program that fools it fools only
// its own tenant's next program. Not checked: files left in the worker's scratch, state
// inside native libraries beyond what these show, GPU memory taken outside torch, and
// loaded CUDA modules (the driver has no call that lists them).
//   auto baseline = kcoral::ReuseBaseline::capture(executor);
//   if (auto why = baseline.departure_now(executor, answer_fds, std::chrono::milliseconds(20))) retire(*why);
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kcoral/executor.hpp"

namespace kcoral {

class ReuseBaseline {
 public:
  // The worker's state now, as the baseline.
  [[nodiscard]] static ReuseBaseline capture(Executor& executor);

  // How the worker's state now differs from this baseline, for a person ("threads: 7
  // after the program, 6 before (new: cuda-EvtHandlr)"); nullopt when it does not.
  // `answer_descriptors`: those the worker holds for the answer it is about to send (the
  // returned values' memory files), left out. Threads more or fewer than the baseline's
  // are counted again, until they match or `settle` has passed: a thread that was joined
  // (the program's output reader, a hashing helper, a Python thread) stays listed in /proc
  // for a moment while the kernel finishes its exit, and a thread of the program's that
  // ends within `settle` has left nothing running. `tool_threads`: threads, by id, that a
  // tool the program used started for good and are not the program's (CUPTI's, for
  // benchmark()), left out of the baseline's count and of the count now.
  [[nodiscard]] std::optional<std::string> departure_now(Executor& executor, const std::set<int>& answer_descriptors,
                                                         std::chrono::milliseconds settle,
                                                         const std::vector<int>& tool_threads = {}) const;

 private:
  // `with_names`: the module names too (InterpreterState), which only a baseline and a
  // changed state need.
  static ReuseBaseline capture(Executor& executor, const std::set<int>& answer_descriptors, bool with_names);
  // `threads_before`: the baseline's threads less the tool's.
  std::optional<std::string> departure(const ReuseBaseline& now, const std::set<int>& threads_before) const;

  std::set<int> threads_;  // by id; named (/proc/self/task/ID/comm) only in a reason
  std::map<int, std::pair<dev_t, ino_t>> descriptors_;  // number -> the file it refers to
  std::vector<std::string> environment_;  // NAME=value, sorted
  InterpreterState interpreter_;
};

}  // namespace kcoral
