// InflightBytes: the server-wide budget of bytes held by requests in flight, from their
// body's first byte until their response is written.
//
// A session reserves what a request will hold before it holds it (the declared length, or
// a chunked body's next growth); when the budget cannot take it, the request is answered
// 503 busy with Retry-After instead of being read. Thread-safe (one atomic).
//
//   InflightBytes budget(1ull << 30);
//   InflightBytes::Reservation held(budget);
//   if (!held.grow_to(length)) return busy();   // released when `held` goes
#pragma once

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

    // Holds `bytes` in all, if the budget has room for the difference.
    [[nodiscard]] bool grow_to(std::uint64_t bytes) {
      if (bytes <= held_) return true;
      if (!budget_.take(bytes - held_)) return false;
      held_ = bytes;
      return true;
    }
    // Holds `bytes` more whatever the budget says: for what is already in memory.
    void add(std::uint64_t bytes) {
      budget_.used_.fetch_add(bytes, std::memory_order_relaxed);
      held_ += bytes;
    }
    void release() { budget_.used_.fetch_sub(std::exchange(held_, 0), std::memory_order_relaxed); }
    [[nodiscard]] std::uint64_t held() const { return held_; }

   private:
    InflightBytes& budget_;
    std::uint64_t held_ = 0;
  };

 private:
  bool take(std::uint64_t bytes) {
    std::uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ || used > limit_ - bytes) return false;
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return true;
  }

  const std::uint64_t limit_;
  std::atomic<std::uint64_t> used_{0};
};

}  // namespace kcoral
