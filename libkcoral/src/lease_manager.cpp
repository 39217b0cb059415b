// LeaseManager: one queue of GPU-set requests in arrival order, walked from the front on
// every change, with direct handoff.
#include "kcoral/lease_manager.hpp"

#include <algorithm>
#include <string>

namespace kcoral {

LeaseManager::LeaseManager(std::size_t gpu_count) : gpu_holders_(gpu_count) {}

Status LeaseManager::acquire(std::vector<std::size_t> gpus, HolderId holder, std::function<void()> granted) {
  std::ranges::sort(gpus);
  Callbacks callbacks;
  {
    std::lock_guard lock(mutex_);
    if (gpus.empty()) return fail(ErrorKind::engine, "a lease was asked for no GPU");
    if (gpus.back() >= gpu_holders_.size())
      return fail(ErrorKind::engine, "no GPU " + std::to_string(gpus.back()) + " on this server");
    if (auto twice = std::ranges::adjacent_find(gpus); twice != gpus.end())
      return fail(ErrorKind::engine, "GPU " + std::to_string(*twice) + " was named twice in one lease");
    Holder& known = holders_[holder];
    if (known.waiting || !known.held.empty())
      return fail(ErrorKind::engine, "the lease was asked for twice by one holder");
    Clock::time_point now = Clock::now();
    known.waiting = true;
    queue_.push_back(Request{holder, std::move(gpus), std::move(granted), now});
    callbacks = grant_locked(now);
  }
  run_granted(callbacks);
  return {};
}

void LeaseManager::release(HolderId holder) {
  Callbacks callbacks;
  {
    std::lock_guard lock(mutex_);
    Clock::time_point now = Clock::now();
    release_locked(holder, now);
    callbacks = grant_locked(now);
  }
  run_granted(callbacks);
}

LeaseTimes LeaseManager::finish(HolderId holder) {
  Callbacks callbacks;
  LeaseTimes result;
  {
    std::lock_guard lock(mutex_);
    Clock::time_point now = Clock::now();
    release_locked(holder, now);
    callbacks = grant_locked(now);
    if (auto it = holders_.find(holder); it != holders_.end()) {
      result = it->second.times;
      holders_.erase(it);
    }
  }
  run_granted(callbacks);
  return result;
}

void LeaseManager::release_locked(HolderId holder, Clock::time_point now) {
  auto known = holders_.find(holder);
  if (known == holders_.end()) return;
  Holder& state = known->second;
  if (!state.held.empty()) {
    state.times.held_ms += ms(now - state.held_since);
    for (std::size_t gpu : state.held) gpu_holders_[gpu].reset();
    state.held.clear();
  }
  if (state.waiting) {
    auto request = std::ranges::find(queue_, holder, &Request::holder);
    state.times.wait_ms += ms(now - request->since);
    queue_.erase(request);
    state.waiting = false;
  }
}

LeaseManager::Callbacks LeaseManager::grant_locked(Clock::time_point now) {
  Callbacks callbacks;
  // The GPUs of the requests passed over so far: they are reserved for those, so nothing
  // later in the queue overtakes them on any of their GPUs.
  std::vector<bool> wanted(gpu_holders_.size(), false);
  for (auto request = queue_.begin(); request != queue_.end();) {
    bool grantable = std::ranges::none_of(
        request->gpus, [&](std::size_t gpu) { return gpu_holders_[gpu].has_value() || wanted[gpu]; });
    if (!grantable) {
      for (std::size_t gpu : request->gpus) wanted[gpu] = true;
      ++request;
      continue;
    }
    Holder& state = holders_[request->holder];
    state.times.wait_ms += ms(now - request->since);
    state.waiting = false;
    state.held = std::move(request->gpus);
    state.held_since = now;
    for (std::size_t gpu : state.held) gpu_holders_[gpu] = request->holder;
    callbacks.push_back(std::move(request->granted));
    request = queue_.erase(request);
  }
  return callbacks;
}

void LeaseManager::run_granted(Callbacks& callbacks) {
  for (auto& callback : callbacks)
    if (callback) callback();
}

std::optional<LeaseManager::HolderId> LeaseManager::holder(std::size_t gpu) const {
  std::lock_guard lock(mutex_);
  return gpu < gpu_holders_.size() ? gpu_holders_[gpu] : std::nullopt;
}

std::size_t LeaseManager::waiting(std::size_t gpu) const {
  std::lock_guard lock(mutex_);
  return static_cast<std::size_t>(std::ranges::count_if(
      queue_, [&](const Request& request) { return std::ranges::binary_search(request.gpus, gpu); }));
}

std::vector<std::size_t> LeaseManager::held(HolderId holder) const {
  std::lock_guard lock(mutex_);
  auto known = holders_.find(holder);
  return known == holders_.end() ? std::vector<std::size_t>{} : known->second.held;
}

LeaseTimes LeaseManager::times(HolderId holder) const {
  std::lock_guard lock(mutex_);
  auto known = holders_.find(holder);
  return known == holders_.end() ? LeaseTimes{} : known->second.times;
}

}  // namespace kcoral
