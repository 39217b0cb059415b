// ReuseBaseline: what a worker that runs several programs of one tenant must find as it
// was, between programs, to take the next one (kcoral-server --reuse-check state).
//
// Captured once the worker is ready, before its first program: its threads, its open
// descriptors (number and target), its environment (the C library's, which os.environ
// mirrors), the interpreter's imported modules and the GPU memory torch has given out.
// After each program the worker captures it again; any difference retires the worker
// (the reason says which). Child processes are checked apart: none may outlive a program.
//
// A hygiene check, not a wall: the program runs in this very process and could forge what
// it reads. Reuse is only ever within one tenant, so a program that fools it fools only
// its own tenant's next program. Not checked: files left in the worker's scratch, state
// inside native libraries beyond what these show, GPU memory taken outside torch, and
// loaded CUDA modules (the driver has no call that lists them).
//   auto baseline = kcoral::ReuseBaseline::capture(executor);
//   if (auto why = baseline.departure(kcoral::ReuseBaseline::capture(executor))) retire(*why);
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kcoral/executor.hpp"

namespace kcoral {

class ReuseBaseline {
 public:
  // `answer_descriptors`: those the worker holds for the answer it is about to send (the
  // returned values' memory files), left out.
  [[nodiscard]] static ReuseBaseline capture(Executor& executor, const std::set<int>& answer_descriptors = {});

  // How `now` differs from this baseline, for a person ("a thread was left running: 3
  // threads, 2 before"); nullopt when it does not.
  [[nodiscard]] std::optional<std::string> departure(const ReuseBaseline& now) const;

 private:
  std::size_t threads_ = 0;
  std::map<int, std::string> descriptors_;  // number -> what it refers to
  std::vector<std::string> environment_;    // NAME=value, sorted
  InterpreterState interpreter_;
};

}  // namespace kcoral
