// Metrics: the counters behind GET /metrics, in the Prometheus text format.
//
// Requests by endpoint and outcome, a latency histogram of /execute, what the front did to
// protect itself, the workers' starts by outcome, and the gauges the pool, the blob store
// and the front (connections, in-flight bytes, descriptors, with their limits) report at
// render time. Each tenant's requests, queue wait, queue, workers, held bytes and cached
// blobs are counted apart, labelled with the name the operator gave it (never its token).
// Thread-safe (atomics).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kcoral/blob_store.hpp"
#include "worker_pool.hpp"

namespace kcoral {

// The front's own gauges, read at render time.
struct FrontGauges {
  std::size_t connections = 0;
  std::size_t max_connections = 0;
  std::uint64_t inflight_bytes = 0;
  std::uint64_t max_inflight_bytes = 0;
  std::size_t open_descriptors = 0;
  std::uint64_t descriptor_limit = 0;
  std::size_t max_queued_per_tenant = 0;
  std::uint64_t max_inflight_bytes_per_tenant = 0;
};

// One tenant's gauges, read at render time.
struct TenantGauges {
  std::string_view name;
  std::size_t running = 0;
  std::size_t waiting = 0;
  std::uint64_t inflight_bytes = 0;
  std::size_t cache_bytes = 0;
  std::size_t cache_blobs = 0;
};

class Metrics {
 public:
  // What the front did to protect itself, as label values.
  enum class Guard {
    over_connection_limit,  // answered 503 (or closed, past the overflow) for too many connections
    accept_backoff,         // accept failed (out of descriptors, say): waited, then accepted again
    idle_timeout,           // a kept-alive connection closed after waiting with no request
    header_timeout,         // a header not complete in time
    slow_body,              // a body slower than the minimum rate: 408
    inflight_full,          // the in-flight byte budget could not take a request: 503
    slow_reader,            // a response read slower than the minimum rate: cut off, answer dropped
    anonymous_per_address,  // with tokens: a connection past its address's anonymous ones, closed
    anonymous_evicted,      // with tokens: the longest-held anonymous connection, closed for a newcomer
    tenant_queue_full,      // a tenant with its most programs waiting: its next one 503
    tenant_inflight_full,   // a tenant's part of the in-flight budget could not take a request: 503
    tenant_connections_full,  // a request on a tenant's connection past its most: 503, closed
    answer_refused,           // a program's answer the in-flight budget could not hold: 503 (or 500, never)
  };
  static constexpr std::array<std::string_view, 13> kGuards{
      "over_connection_limit", "accept_backoff",    "idle_timeout",          "header_timeout",
      "slow_body",             "inflight_full",     "slow_reader",           "anonymous_per_address",
      "anonymous_evicted",     "tenant_queue_full", "tenant_inflight_full",  "tenant_connections_full",
      "answer_refused"};

  // Why reused workers were retired, as label values: what their reuse check found changed.
  static constexpr std::array<std::string_view, 8> kRetirements{
      "threads", "descriptors", "environment", "imported modules", "GPU memory", "processes", "CUDA context", "other"};

  // The outcomes of POST /execute, as label values.
  static constexpr std::array<std::string_view, 12> kOutcomes{
      "completed", "failed", "cache_miss", "rejected",  "unauthorized", "too_large",
      "busy",      "timeout", "error",     "abandoned", "slow_client", "other"};
  static constexpr std::array<double, 16> kBucketsSeconds{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120, 900};

  // `tenants`: how many the per-tenant counters are kept for (tenants.hpp).
  explicit Metrics(std::size_t tenants = 1);

  // `tenant`: whose request it was (none: anonymous); `queue_ms`: its wait for a worker.
  void record_execute(std::string_view outcome, double seconds, std::optional<std::size_t> tenant = std::nullopt,
                      double queue_ms = 0);
  void record_other_request() { other_requests_.fetch_add(1, std::memory_order_relaxed); }
  void record(Guard guard) { guards_[static_cast<std::size_t>(guard)].fetch_add(1, std::memory_order_relaxed); }
  // A reused worker retired by its reuse check, counted by the kind its reason starts with
  // (worker/reuse_baseline.cpp: "threads: ...") among kRetirements, else as "other".
  void record_worker_retired(std::string_view reason);
  [[nodiscard]] std::string render(const WorkerPool::Load& load, const BlobStore& blobs,
                                   const FrontGauges& front = {},
                                   std::span<const TenantGauges> tenants = {},
                                   const WorkerStarts::Counts& starts = {}) const;

 private:
  std::array<std::atomic<std::uint64_t>, kOutcomes.size()> outcomes_{};
  std::array<std::atomic<std::uint64_t>, kBucketsSeconds.size()> buckets_{};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> sum_microseconds_{0};
  std::atomic<std::uint64_t> other_requests_{0};
  std::array<std::atomic<std::uint64_t>, kGuards.size()> guards_{};
  std::array<std::atomic<std::uint64_t>, kRetirements.size()> retirements_{};
  void render_tenants(std::ostream& out, const FrontGauges& front, std::span<const TenantGauges> tenants) const;

  struct TenantCounters {
    std::array<std::atomic<std::uint64_t>, kOutcomes.size()> outcomes{};
    std::atomic<std::uint64_t> queue_microseconds{0};
  };
  std::vector<TenantCounters> tenants_;
};

}  // namespace kcoral
