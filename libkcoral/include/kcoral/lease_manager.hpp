// LeaseManager: exclusive use of each GPU, first come first served, with wait and hold
// time accounted per holder.
//
// A release hands the GPU directly to the longest waiter, in the releasing call, so no
// third party can slip in between. `granted` callbacks run outside the manager's lock, on
// the thread that made the grant possible (the acquiring or the releasing one). Holders are
// opaque ids; `finish` forgets one everywhere (as when its worker was killed) and returns
// its times. Thread-safe.
//
//   kcoral::LeaseManager leases(1);
//   if (auto status = leases.acquire(0, worker_id, [] { start(); }); !status) ...;
//   ...
//   leases.release(0, worker_id);
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
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

  [[nodiscard]] std::size_t gpu_count() const { return gpus_.size(); }

  // Queues `holder` for `gpu`; `granted` runs once the lease is its. Fails for an unknown
  // GPU or a holder that already holds or waits for this GPU.
  [[nodiscard]] Status acquire(std::size_t gpu, HolderId holder, std::function<void()> granted);
  // Gives the GPU up (or leaves its queue) and hands it to the next waiter.
  void release(std::size_t gpu, HolderId holder);
  // Removes `holder` from every GPU, releasing what it holds, and returns its times.
  LeaseTimes finish(HolderId holder);

  [[nodiscard]] std::optional<HolderId> holder(std::size_t gpu) const;
  [[nodiscard]] std::size_t waiting(std::size_t gpu) const;
  // The times accumulated so far by a holder still known to the manager.
  [[nodiscard]] LeaseTimes times(HolderId holder) const;

 private:
  struct Waiter {
    HolderId holder;
    std::function<void()> granted;
    Clock::time_point since;
  };
  struct Gpu {
    std::optional<HolderId> holder;
    Clock::time_point held_since;
    std::deque<Waiter> queue;
  };
  // Moves the lease to the next waiter; returns the callback to run after unlocking.
  std::function<void()> hand_off_locked(Gpu& gpu, Clock::time_point now);
  static double ms(Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  }

  mutable std::mutex mutex_;
  std::vector<Gpu> gpus_;
  std::unordered_map<HolderId, LeaseTimes> times_;
};

}  // namespace kcoral
