// Metrics rendering (Prometheus text exposition format, version 0.0.4).
#include "metrics.hpp"

#include <algorithm>
#include <sstream>

namespace kcoral {

Metrics::Metrics(std::size_t tenants) : tenants_(tenants) {}

void Metrics::record_execute(std::string_view outcome, double seconds, std::optional<std::size_t> tenant,
                             double queue_ms) {
  std::size_t index = kOutcomes.size() - 1;
  for (std::size_t i = 0; i < kOutcomes.size(); ++i)
    if (kOutcomes[i] == outcome) index = i;
  outcomes_[index].fetch_add(1, std::memory_order_relaxed);
  if (tenant && *tenant < tenants_.size()) {
    tenants_[*tenant].outcomes[index].fetch_add(1, std::memory_order_relaxed);
    tenants_[*tenant].queue_microseconds.fetch_add(static_cast<std::uint64_t>(std::max(0.0, queue_ms) * 1e3),
                                                   std::memory_order_relaxed);
  }
  for (std::size_t i = 0; i < kBucketsSeconds.size(); ++i)
    if (seconds <= kBucketsSeconds[i]) buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_microseconds_.fetch_add(static_cast<std::uint64_t>(seconds * 1e6), std::memory_order_relaxed);
}

namespace {

// Microseconds as seconds, every digit kept (the stream's default would keep six).
std::string seconds_text(std::uint64_t microseconds) {
  std::string fraction = std::to_string(microseconds % 1000000);
  return std::to_string(microseconds / 1000000) + "." + std::string(6 - fraction.size(), '0') + fraction;
}

template <class Value>
void gauge(std::ostream& out, std::string_view name, std::string_view help, Value value) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << " " << value << "\n";
}

}  // namespace

std::string Metrics::render(const WorkerPool::Load& load, const BlobStore& blobs, const FrontGauges& front,
                            std::span<const TenantGauges> tenants, const WorkerStarts::Counts& starts) const {
  std::ostringstream out;
  out << "# HELP kcoral_execute_requests_total POST /execute requests by outcome.\n"
      << "# TYPE kcoral_execute_requests_total counter\n";
  for (std::size_t i = 0; i < kOutcomes.size(); ++i)
    out << "kcoral_execute_requests_total{outcome=\"" << kOutcomes[i] << "\"} " << outcomes_[i].load() << "\n";
  out << "# HELP kcoral_other_requests_total Requests to other endpoints.\n"
      << "# TYPE kcoral_other_requests_total counter\n"
      << "kcoral_other_requests_total " << other_requests_.load() << "\n";
  out << "# HELP kcoral_execute_duration_seconds Time from a request's arrival to its response.\n"
      << "# TYPE kcoral_execute_duration_seconds histogram\n";
  for (std::size_t i = 0; i < kBucketsSeconds.size(); ++i)
    out << "kcoral_execute_duration_seconds_bucket{le=\"" << kBucketsSeconds[i] << "\"} " << buckets_[i].load() << "\n";
  out << "kcoral_execute_duration_seconds_bucket{le=\"+Inf\"} " << count_.load() << "\n"
      << "kcoral_execute_duration_seconds_sum " << seconds_text(sum_microseconds_.load()) << "\n"
      << "kcoral_execute_duration_seconds_count " << count_.load() << "\n";
  out << "# HELP kcoral_queue_depth Accepted programs waiting for a worker.\n"
      << "# TYPE kcoral_queue_depth gauge\n"
      << "kcoral_queue_depth " << load.waiting << "\n"
      << "# HELP kcoral_workers_busy Workers running a program.\n"
      << "# TYPE kcoral_workers_busy gauge\n"
      << "kcoral_workers_busy " << load.running << "\n"
      << "# HELP kcoral_gpus_busy GPUs held by running programs (a program counts its gpu_count, at least "
         "1; on a CPU server, as kcoral_workers_busy).\n"
      << "# TYPE kcoral_gpus_busy gauge\n"
      << "kcoral_gpus_busy " << load.gpus_running << "\n"
      << "# HELP kcoral_gpus_waiting GPUs asked for by programs waiting for a worker (as kcoral_gpus_busy).\n"
      << "# TYPE kcoral_gpus_waiting gauge\n"
      << "kcoral_gpus_waiting " << load.gpus_waiting << "\n"
      << "# HELP kcoral_workers_capacity Programs that can run at once.\n"
      << "# TYPE kcoral_workers_capacity gauge\n"
      << "kcoral_workers_capacity " << load.capacity << "\n"
      << "# HELP kcoral_worker_starts_total Worker starts by outcome: ready, failed (ended or said why before "
         "ready), timed_out (killed at the start deadline).\n"
      << "# TYPE kcoral_worker_starts_total counter\n"
      << "kcoral_worker_starts_total{outcome=\"ready\"} " << starts.ready << "\n"
      << "kcoral_worker_starts_total{outcome=\"failed\"} " << starts.failed << "\n"
      << "kcoral_worker_starts_total{outcome=\"timed_out\"} " << starts.timed_out << "\n"
      << "# HELP kcoral_worker_starts_failing 1 while no worker can start (the last starts failed): programs are "
         "answered engine at once.\n"
      << "# TYPE kcoral_worker_starts_failing gauge\n"
      << "kcoral_worker_starts_failing " << (starts.failing ? 1 : 0) << "\n"
      << "# HELP kcoral_blob_cache_bytes Bytes held by the blob cache.\n"
      << "# TYPE kcoral_blob_cache_bytes gauge\n"
      << "kcoral_blob_cache_bytes " << blobs.size_bytes() << "\n"
      << "# HELP kcoral_blob_cache_blobs Blobs held by the blob cache.\n"
      << "# TYPE kcoral_blob_cache_blobs gauge\n"
      << "kcoral_blob_cache_blobs " << blobs.count() << "\n";
  auto gauge = [&out](std::string_view name, std::string_view help, auto value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << " " << value << "\n";
  };
  gauge("kcoral_blob_cache_files", "Memory files (descriptors) held by the blob cache.", blobs.files());
  gauge("kcoral_blob_cache_max_bytes", "The blob cache's byte budget.", blobs.limits().bytes);
  gauge("kcoral_blob_cache_max_blobs", "The blob cache's blob budget.", blobs.limits().blobs);
  gauge("kcoral_blob_cache_max_files", "The blob cache's file (descriptor) budget.", blobs.limits().files);
  if (const DiskBlobCache* disk = blobs.disk()) {
    gauge("kcoral_disk_cache_bytes",
          "Disk the blobs kept on disk are charged (--disk-cache-dir): their 4 KiB blocks and one more each.",
          disk->size_bytes());
    gauge("kcoral_disk_cache_blobs", "Blobs kept on disk.", disk->count());
    gauge("kcoral_disk_cache_max_bytes", "The disk cache's budget.", disk->capacity_bytes());
    gauge("kcoral_disk_cache_max_blobs", "The blobs the disk cache keeps at most (--disk-cache-max-blobs).",
          disk->max_blobs());
  }
  gauge("kcoral_connections", "Open client connections.", front.connections);
  gauge("kcoral_connections_max", "Connections served at once (--max-connections).", front.max_connections);
  gauge("kcoral_inflight_bytes", "Request bytes held by requests in flight.", front.inflight_bytes);
  gauge("kcoral_inflight_bytes_max", "The in-flight byte budget (--max-inflight-bytes).", front.max_inflight_bytes);
  gauge("kcoral_open_descriptors", "Descriptors the front has open.", front.open_descriptors);
  gauge("kcoral_descriptor_limit", "The front's descriptor limit (RLIMIT_NOFILE).", front.descriptor_limit);
  out << "# HELP kcoral_guard_events_total What the front did to protect itself, by kind.\n"
      << "# TYPE kcoral_guard_events_total counter\n";
  for (std::size_t i = 0; i < kGuards.size(); ++i)
    out << "kcoral_guard_events_total{event=\"" << kGuards[i] << "\"} " << guards_[i].load() << "\n";
  out << "# HELP kcoral_workers_retired_total Reused workers retired because a program left their state changed, "
         "by what changed.\n"
      << "# TYPE kcoral_workers_retired_total counter\n";
  for (std::size_t i = 0; i < kRetirements.size(); ++i)
    out << "kcoral_workers_retired_total{changed=\"" << kRetirements[i] << "\"} " << retirements_[i].load() << "\n";
  render_tenants(out, front, tenants);
  return out.str();
}

void Metrics::record_worker_retired(std::string_view reason) {
  std::string_view kind = reason.substr(0, reason.find(':'));
  auto found = std::find(kRetirements.begin(), kRetirements.end() - 1, kind);
  retirements_[static_cast<std::size_t>(found - kRetirements.begin())].fetch_add(1, std::memory_order_relaxed);
}

// Names are letters, digits, '.', '_' and '-' (tenants.hpp): label values as they are.
void Metrics::render_tenants(std::ostream& out, const FrontGauges& front,
                             std::span<const TenantGauges> tenants) const {
  gauge(out, "kcoral_tenant_max_queued", "Programs one tenant may have waiting (--max-queued-per-tenant).",
        front.max_queued_per_tenant);
  gauge(out, "kcoral_tenant_inflight_bytes_max", "One tenant's part of the in-flight budget.",
        front.max_inflight_bytes_per_tenant);
  out << "# HELP kcoral_tenant_execute_requests_total POST /execute requests by tenant and outcome.\n"
      << "# TYPE kcoral_tenant_execute_requests_total counter\n";
  for (std::size_t t = 0; t < tenants.size() && t < tenants_.size(); ++t)
    for (std::size_t i = 0; i < kOutcomes.size(); ++i)
      out << "kcoral_tenant_execute_requests_total{tenant=\"" << tenants[t].name << "\",outcome=\"" << kOutcomes[i]
          << "\"} " << tenants_[t].outcomes[i].load() << "\n";
  out << "# HELP kcoral_tenant_queue_wait_seconds_total Time the tenant's programs waited for a worker.\n"
      << "# TYPE kcoral_tenant_queue_wait_seconds_total counter\n";
  for (std::size_t t = 0; t < tenants.size() && t < tenants_.size(); ++t)
    out << "kcoral_tenant_queue_wait_seconds_total{tenant=\"" << tenants[t].name << "\"} "
        << seconds_text(tenants_[t].queue_microseconds.load()) << "\n";
  auto by_tenant = [&](std::string_view name, std::string_view help, auto value_of) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
    for (const TenantGauges& tenant : tenants)
      out << name << "{tenant=\"" << tenant.name << "\"} " << value_of(tenant) << "\n";
  };
  by_tenant("kcoral_tenant_queue_depth", "The tenant's programs waiting for a worker.",
            [](const TenantGauges& t) { return t.waiting; });
  by_tenant("kcoral_tenant_workers_busy", "Workers running the tenant's programs.",
            [](const TenantGauges& t) { return t.running; });
  by_tenant("kcoral_tenant_inflight_bytes", "Request bytes the tenant's requests hold.",
            [](const TenantGauges& t) { return t.inflight_bytes; });
  by_tenant("kcoral_tenant_blob_cache_bytes", "Bytes of the tenant's blobs in the blob cache.",
            [](const TenantGauges& t) { return t.cache_bytes; });
  by_tenant("kcoral_tenant_blob_cache_blobs", "The tenant's blobs in the blob cache.",
            [](const TenantGauges& t) { return t.cache_blobs; });
}

}  // namespace kcoral
