// LeaseBroker: the GPU leases the front holds on behalf of its workers.
//
// Two kinds: the program lease of a worker's GPUs (exclusive, all of the worker's GPUs at
// once or none, first come first served; see kcoral::LeaseManager) and, per GPU, the turns
// in which new workers make their CUDA contexts (at most `context_inits_at_once` at a
// time, the rest queue). A worker names its GPUs: one for a worker of a per-GPU group,
// several for a set group's (WorkerGroups). Holders are worker pids. The broker trusts
// its caller to ask only for what a worker may ask (the WorkerHandle's state machine sees
// to that); `finish` takes back whatever a worker holds or waits for, also when it was
// killed. `granted` callbacks run on the caller's strand: at once, or inside the release
// that frees the lease. Used on the pool's strand only.
//
//   broker.acquire_program(gpus, pid, [] { tell_worker(); });
//   LeaseTimes times = broker.finish(gpus, pid);
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

  // Queues `worker` for every one of `gpus`; `granted` runs once it holds them all.
  [[nodiscard]] Status acquire_program(const std::vector<std::size_t>& gpus, pid_t worker, Granted granted);
  // Gives back the program lease `worker` holds, or leaves the queue for it.
  void release_program(pid_t worker);
  // The worker other than `worker` that holds the program lease of any of `gpus`, if any
  // (whose program a cpu_only call of `worker` may have disturbed).
  [[nodiscard]] std::optional<pid_t> program_holder(const std::vector<std::size_t>& gpus, pid_t worker) const;

  // A context-making turn for a worker of `gpus`. A worker of one GPU queues for that
  // GPU's turns. A worker of several is granted at once and takes no GPU's turn: it is
  // forked only for a program that already waits for it, and queueing it behind prepared
  // workers' context making would only lengthen that wait.
  void acquire_init(const std::vector<std::size_t>& gpus, pid_t worker, Granted granted);
  void release_init(const std::vector<std::size_t>& gpus, pid_t worker);

  // Takes back everything `worker` holds or waits for; returns its program lease times.
  LeaseTimes finish(const std::vector<std::size_t>& gpus, pid_t worker);

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
