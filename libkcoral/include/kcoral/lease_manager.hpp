// LeaseManager: exclusive use of sets of GPUs, first come first served, with wait and hold
// time accounted per holder.
//
// A holder gets the whole set it asks for at once or waits for all of it, never holding part
// while it waits, so two holders that want crossing sets cannot deadlock. Requests wait in
// one queue in arrival order. Whenever GPUs are released or asked for, the queue is walked
// from the front: a request is granted when all its GPUs are free and no earlier waiting
// request wants any of them. Earlier waiters thus reserve their GPUs, and a set is never
// starved by a stream of smaller requests, while a request on GPUs nobody ahead of it wants
// may go first. For one-GPU requests this is a FIFO per GPU.
//
// A release hands the GPUs directly to the waiters, in the releasing call, so no third party
// can slip in between. `granted` callbacks run outside the manager's lock, in queue order, on
// the thread that made the grant possible (the acquiring or the releasing one). Holders are
// opaque ids with one request at a time; `finish` forgets one everywhere (as when its worker
// was killed) and returns its times. Thread-safe.
//
//   kcoral::LeaseManager leases(4);
//   if (auto status = leases.acquire({0, 1}, worker_id, [] { start(); }); !status) ...;
//   ...
//   leases.release(worker_id);
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kcoral/error.hpp"

namespace kcoral {

struct LeaseTimes {
  double wait_ms = 0;
  double held_ms = 0;
};

class LeaseManager {
 public:
  using HolderId = std::uint64_t;
  using Clock = std::chrono::steady_clock;

  explicit LeaseManager(std::size_t gpu_count);
  LeaseManager(const LeaseManager&) = delete;
  LeaseManager& operator=(const LeaseManager&) = delete;

  [[nodiscard]] std::size_t gpu_count() const { return gpu_holders_.size(); }

  // Queues `holder` for all of `gpus`; `granted` runs once the whole set is its. Fails for
  // an empty set, an unknown GPU, a GPU named twice, or a holder that already holds or waits
  // for anything. `granted` must not throw: grants made in the same call would go untold.
  [[nodiscard]] Status acquire(std::vector<std::size_t> gpus, HolderId holder, std::function<void()> granted);
  [[nodiscard]] Status acquire(std::size_t gpu, HolderId holder, std::function<void()> granted) {
    return acquire(std::vector<std::size_t>{gpu}, holder, std::move(granted));
  }
  // Gives up everything `holder` holds (or takes its request out of the queue) and hands
  // the freed GPUs on. Does nothing for a holder that neither holds nor waits.
  void release(HolderId holder);
  // Releases as `release` does, forgets `holder` and returns its times.
  LeaseTimes finish(HolderId holder);

  [[nodiscard]] std::optional<HolderId> holder(std::size_t gpu) const;
  // How many queued requests want this GPU.
  [[nodiscard]] std::size_t waiting(std::size_t gpu) const;
  // The GPUs `holder` holds, ascending; empty while it waits or holds nothing.
  [[nodiscard]] std::vector<std::size_t> held(HolderId holder) const;
  // The times accumulated so far by a holder still known to the manager.
  [[nodiscard]] LeaseTimes times(HolderId holder) const;

 private:
  using Callbacks = std::vector<std::function<void()>>;
  struct Request {
    HolderId holder;
    std::vector<std::size_t> gpus;  // ascending
    std::function<void()> granted;
    Clock::time_point since;
  };
  struct Holder {
    LeaseTimes times;
    std::vector<std::size_t> held;  // ascending
    Clock::time_point held_since;
    bool waiting = false;
  };
  // Releases what `holder` holds or takes its request out of the queue.
  void release_locked(HolderId holder, Clock::time_point now);
  // Walks the queue and grants what the rule allows; returns the callbacks to run after
  // unlocking, in queue order.
  Callbacks grant_locked(Clock::time_point now);
  static void run_granted(Callbacks& callbacks);
  static double ms(Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  }

  mutable std::mutex mutex_;
  std::vector<std::optional<HolderId>> gpu_holders_;
  std::list<Request> queue_;  // arrival order; grants take requests out of the middle
  std::unordered_map<HolderId, Holder> holders_;
};

}  // namespace kcoral
