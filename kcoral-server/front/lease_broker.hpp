// LeaseBroker: the GPU leases the front holds on behalf of its workers.
//
// Per GPU, two kinds: the program lease (exclusive, first come first served, handed
// straight to the longest waiter; see kcoral::LeaseManager) and the turns in which new
// workers make their CUDA contexts (at most `context_inits_at_once` at a time, the rest
// queue). Holders are worker pids. The broker trusts its caller to ask only for what a
// worker may ask (the WorkerHandle's state machine sees to that); `finish` takes back
// whatever a worker holds or waits for, also when it was killed. `granted` callbacks run
// on the caller's strand: at once, or inside the release that frees the lease.
// Used on the pool's strand only.
//
//   broker.acquire_program(gpu, pid, [] { tell_worker(); });
//   LeaseTimes times = broker.finish(gpu, pid);
#pragma once

#include <sys/types.h>

#include <deque>
#include <functional>
#include <optional>
#include <vector>

#include "kcoral/lease_manager.hpp"

namespace kcoral {

class LeaseBroker {
 public:
  using Granted = std::function<void()>;

  LeaseBroker(std::size_t gpus, std::size_t context_inits_at_once);

  [[nodiscard]] Status acquire_program(std::size_t gpu, pid_t worker, Granted granted);
  // Gives back the program lease `worker` holds, or leaves the queue for it.
  void release_program(pid_t worker);
  [[nodiscard]] std::optional<pid_t> program_holder(std::size_t gpu) const;

  void acquire_init(std::size_t gpu, pid_t worker, Granted granted);
  void release_init(std::size_t gpu, pid_t worker);

  // Takes back everything `worker` holds or waits for; returns its program lease times.
  LeaseTimes finish(std::size_t gpu, pid_t worker);

 private:
  struct InitWaiter {
    pid_t worker;
    Granted granted;
  };
  struct InitTurns {
    std::vector<pid_t> holders;
    std::deque<InitWaiter> waiting;
  };
  void hand_out_init_turns(std::size_t gpu);

  LeaseManager program_leases_;
  std::size_t context_inits_at_once_;
  std::vector<InitTurns> init_turns_;
};

}  // namespace kcoral
