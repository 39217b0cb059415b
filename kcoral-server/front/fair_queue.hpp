// FairQueue: the programs waiting for a worker, one first-in-first-out queue per tenant,
// served so that tenants share the workers rather than take turns by arrival.
//
// When a worker is free, the next program comes from the tenant that has one waiting and
// the fewest running; among equals, from the one served longest ago. So one tenant's
// hundred queued programs make another's wait for one worker to come free, not for all of
// them to run, and two busy tenants get the workers half each. A tenant may have at most
// `max_queued_per_tenant` waiting; a program put back (its worker died before it started)
// is first in its tenant's queue again and never refused. Tenants are 0 to tenants - 1.
// Not thread-safe: the worker pool uses it on its strand.
//
//   FairQueue<Job> queue(2, 256);
//   if (!queue.push(tenant, job)) refuse();      // the tenant has 256 waiting
//   if (auto next = queue.pop()) run(*next);     // its tenant counts one more running
//   queue.finished(tenant);                      // when that program ends
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

namespace kcoral {

template <class T>
class FairQueue {
 public:
  FairQueue(std::size_t tenants, std::size_t max_queued_per_tenant)
      : tenants_(std::max<std::size_t>(1, tenants)), max_queued_(max_queued_per_tenant) {}

  // Queues `item` last in its tenant's queue; false when that tenant has its most waiting.
  [[nodiscard]] bool push(std::size_t tenant, T item) {
    Tenant& queue = tenants_.at(tenant);
    if (queue.waiting.size() >= max_queued_) return false;
    queue.waiting.push_back(std::move(item));
    ++size_;
    return true;
  }

  // The tenant whose item pop() would return; nullopt when none waits.
  [[nodiscard]] std::optional<std::size_t> next_tenant() const {
    std::optional<std::size_t> chosen;
    for (std::size_t i = 0; i < tenants_.size(); ++i) {
      const Tenant& candidate = tenants_[i];
      if (candidate.waiting.empty()) continue;
      if (!chosen || candidate.running < tenants_[*chosen].running ||
          (candidate.running == tenants_[*chosen].running && candidate.served < tenants_[*chosen].served))
        chosen = i;
    }
    return chosen;
  }

  // The item pop() would return, left in place; null when none waits.
  [[nodiscard]] const T* peek() const {
    std::optional<std::size_t> chosen = next_tenant();
    return chosen ? &tenants_[*chosen].waiting.front() : nullptr;
  }

  // The next item by fairness (see above), counted as running for its tenant; nullopt
  // when none waits.
  [[nodiscard]] std::optional<T> pop() {
    std::optional<std::size_t> chosen = next_tenant();
    if (!chosen) return std::nullopt;
    Tenant& tenant = tenants_[*chosen];
    T item = std::move(tenant.waiting.front());
    tenant.waiting.pop_front();
    --size_;
    ++tenant.running;
    tenant.served = ++serial_;
    return item;
  }

  // An item popped that did not start: first in its tenant's queue again, not running.
  void put_back(std::size_t tenant, T item) {
    Tenant& queue = tenants_.at(tenant);
    queue.waiting.push_front(std::move(item));
    ++size_;
    if (queue.running > 0) --queue.running;
  }

  // One of the tenant's popped items ended.
  void finished(std::size_t tenant) {
    Tenant& queue = tenants_.at(tenant);
    if (queue.running > 0) --queue.running;
  }

  // Takes the first waiting item of `tenant` that `match` accepts, if any.
  template <class Match>
  [[nodiscard]] std::optional<T> take(std::size_t tenant, Match match) {
    auto& waiting = tenants_.at(tenant).waiting;
    for (auto it = waiting.begin(); it != waiting.end(); ++it) {
      if (!match(*it)) continue;
      T item = std::move(*it);
      waiting.erase(it);
      --size_;
      return item;
    }
    return std::nullopt;
  }

  // Every waiting item, tenant by tenant, leaving none.
  [[nodiscard]] std::vector<T> take_all() {
    std::vector<T> all;
    for (Tenant& tenant : tenants_) {
      for (T& item : tenant.waiting) all.push_back(std::move(item));
      tenant.waiting.clear();
    }
    size_ = 0;
    return all;
  }

  [[nodiscard]] bool empty() const { return size_ == 0; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::size_t tenants() const { return tenants_.size(); }
  [[nodiscard]] std::size_t waiting(std::size_t tenant) const { return tenants_.at(tenant).waiting.size(); }
  [[nodiscard]] std::size_t running(std::size_t tenant) const { return tenants_.at(tenant).running; }
  [[nodiscard]] std::size_t max_queued_per_tenant() const { return max_queued_; }

 private:
  struct Tenant {
    std::deque<T> waiting;
    std::size_t running = 0;
    std::uint64_t served = 0;  // serial of its last pop; 0: never served
  };

  std::vector<Tenant> tenants_;
  const std::size_t max_queued_;
  std::size_t size_ = 0;
  std::uint64_t serial_ = 0;
};

}  // namespace kcoral
