// Metrics: the counters behind GET /metrics, in the Prometheus text format.
//
// Requests by endpoint and outcome, a latency histogram of /execute, and the gauges the
// pool and blob store report at render time. Thread-safe (atomics).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "kcoral/blob_store.hpp"
#include "worker_pool.hpp"

namespace kcoral {

class Metrics {
 public:
  // The outcomes of POST /execute, as label values.
  static constexpr std::array<std::string_view, 9> kOutcomes{
      "completed", "failed", "cache_miss", "rejected", "too_large", "busy", "timeout", "error", "other"};
  static constexpr std::array<double, 16> kBucketsSeconds{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120, 900};

  void record_execute(std::string_view outcome, double seconds);
  void record_other_request() { other_requests_.fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] std::string render(const WorkerPool::Load& load, const BlobStore& blobs) const;

 private:
  std::array<std::atomic<std::uint64_t>, kOutcomes.size()> outcomes_{};
  std::array<std::atomic<std::uint64_t>, kBucketsSeconds.size()> buckets_{};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> sum_microseconds_{0};
  std::atomic<std::uint64_t> other_requests_{0};
};

}  // namespace kcoral
