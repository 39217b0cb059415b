// LeaseManager: per-GPU FIFO queues with direct handoff.
#include "kcoral/lease_manager.hpp"

#include <algorithm>

namespace kcoral {

LeaseManager::LeaseManager(std::size_t gpu_count) : gpus_(gpu_count) {}

Status LeaseManager::acquire(std::size_t gpu_index, HolderId holder, std::function<void()> granted) {
  std::unique_lock lock(mutex_);
  if (gpu_index >= gpus_.size())
    return fail(ErrorKind::engine, "no GPU " + std::to_string(gpu_index) + " on this server");
  Gpu& gpu = gpus_[gpu_index];
  bool queued = std::any_of(gpu.queue.begin(), gpu.queue.end(),
                            [&](const Waiter& w) { return w.holder == holder; });
  if (gpu.holder == holder || queued)
    return fail(ErrorKind::engine, "the lease was asked for twice by one holder");
  times_.try_emplace(holder);
  Clock::time_point now = Clock::now();
  if (!gpu.holder && gpu.queue.empty()) {
    gpu.holder = holder;
    gpu.held_since = now;
    lock.unlock();
    granted();
    return {};
  }
  gpu.queue.push_back({holder, std::move(granted), now});
  return {};
}

void LeaseManager::release(std::size_t gpu_index, HolderId holder) {
  std::function<void()> next;
  {
    std::lock_guard lock(mutex_);
    if (gpu_index >= gpus_.size()) return;
    Gpu& gpu = gpus_[gpu_index];
    Clock::time_point now = Clock::now();
    if (gpu.holder == holder) {
      times_[holder].held_ms += ms(now - gpu.held_since);
      gpu.holder.reset();
      next = hand_off_locked(gpu, now);
    } else {
      auto it = std::find_if(gpu.queue.begin(), gpu.queue.end(),
                             [&](const Waiter& w) { return w.holder == holder; });
      if (it != gpu.queue.end()) {
        times_[holder].wait_ms += ms(now - it->since);
        gpu.queue.erase(it);
      }
    }
  }
  if (next) next();
}

LeaseTimes LeaseManager::finish(HolderId holder) {
  for (std::size_t i = 0; i < gpu_count(); ++i) release(i, holder);
  std::lock_guard lock(mutex_);
  auto it = times_.find(holder);
  if (it == times_.end()) return {};
  LeaseTimes result = it->second;
  times_.erase(it);
  return result;
}

std::function<void()> LeaseManager::hand_off_locked(Gpu& gpu, Clock::time_point now) {
  if (gpu.queue.empty()) return {};
  Waiter waiter = std::move(gpu.queue.front());
  gpu.queue.pop_front();
  times_[waiter.holder].wait_ms += ms(now - waiter.since);
  gpu.holder = waiter.holder;
  gpu.held_since = now;
  return std::move(waiter.granted);
}

std::optional<LeaseManager::HolderId> LeaseManager::holder(std::size_t gpu) const {
  std::lock_guard lock(mutex_);
  return gpu < gpus_.size() ? gpus_[gpu].holder : std::nullopt;
}

std::size_t LeaseManager::waiting(std::size_t gpu) const {
  std::lock_guard lock(mutex_);
  return gpu < gpus_.size() ? gpus_[gpu].queue.size() : 0;
}

LeaseTimes LeaseManager::times(HolderId holder) const {
  std::lock_guard lock(mutex_);
  auto it = times_.find(holder);
  return it == times_.end() ? LeaseTimes{} : it->second;
}

}  // namespace kcoral
