// InflightBytes: the server-wide budget of bytes held by requests in flight, from their
// body's first byte until their response is written, and each tenant's part of it.
//
// A session reserves what a request will hold before it holds it (the declared length, or
// a chunked body's next growth); when the budget cannot take it, the request is answered
// 503 busy with Retry-After instead of being read. Once the request's tenant is known, its
// reservation is held in that tenant's budget too, so that one tenant cannot take the
// whole server's. Thread-safe (one atomic per budget).
//
//   InflightBytes budget(1ull << 30), alice(512ull << 20);
//   InflightBytes::Reservation held(budget);
//   held.set_tenant(&alice);
//   if (!held.grow_to(length)) return busy();   // released when `held` goes
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

namespace kcoral {

class InflightBytes {
 public:
  explicit InflightBytes(std::uint64_t limit) : limit_(limit) {}
  InflightBytes(const InflightBytes&) = delete;
  InflightBytes& operator=(const InflightBytes&) = delete;

  [[nodiscard]] std::uint64_t limit() const { return limit_; }
  [[nodiscard]] std::uint64_t used() const { return used_.load(std::memory_order_relaxed); }

  // One holder's share; grows on request, released all at once.
  class Reservation {
   public:
    explicit Reservation(InflightBytes& budget) : budget_(budget) {}
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { release(); }

    // From now on holds in `tenant`'s budget too (none: null); what it held is released.
    void set_tenant(InflightBytes* tenant) {
      release();
      tenant_ = tenant;
      tenant_refused_ = false;
    }
    // Holds `bytes` in all, if the budgets have room for the difference.
    [[nodiscard]] bool grow_to(std::uint64_t bytes) {
      if (bytes <= held_) return true;
      const std::uint64_t more = bytes - held_;
      // The server's budget first: a refusal is the tenant's only when the server had room
      // (so on a server of one tenant, whose part is the whole budget, never).
      tenant_refused_ = false;
      if (!budget_.take(more)) return false;
      if (tenant_ != nullptr && !tenant_->take(more)) {
        budget_.give(more);
        tenant_refused_ = true;
        return false;
      }
      held_ = bytes;
      return true;
    }
    // Whether `bytes` could be held at all, in budgets that held nothing else.
    [[nodiscard]] bool could_hold(std::uint64_t bytes) const {
      return bytes <= budget_.limit() && (tenant_ == nullptr || bytes <= tenant_->limit());
    }
    // Whether the last refusal came from the tenant's budget rather than the server's.
    [[nodiscard]] bool tenant_refused() const { return tenant_refused_; }
    // Holds `bytes` more whatever the budgets say: for what is already in memory.
    void add(std::uint64_t bytes) {
      budget_.used_.fetch_add(bytes, std::memory_order_relaxed);
      if (tenant_ != nullptr) tenant_->used_.fetch_add(bytes, std::memory_order_relaxed);
      held_ += bytes;
    }
    // Holds `bytes` fewer (at most all it holds): for what has been freed.
    void give_back(std::uint64_t bytes) {
      bytes = std::min(bytes, held_);
      held_ -= bytes;
      budget_.give(bytes);
      if (tenant_ != nullptr) tenant_->give(bytes);
    }
    void release() {
      std::uint64_t held = std::exchange(held_, 0);
      budget_.give(held);
      if (tenant_ != nullptr) tenant_->give(held);
    }
    [[nodiscard]] std::uint64_t held() const { return held_; }

   private:
    InflightBytes& budget_;
    InflightBytes* tenant_ = nullptr;
    std::uint64_t held_ = 0;
    bool tenant_refused_ = false;
  };

 private:
  bool take(std::uint64_t bytes) {
    std::uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ || used > limit_ - bytes) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  }
  void give(std::uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

  const std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
};

}  // namespace kcoral
