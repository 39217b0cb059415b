// Metrics (kcoral-server/metrics.cpp): /execute outcomes counted by label (unknown labels
// as "other"), a cumulative latency histogram with +Inf, _sum and _count, the other-request
// counter and the gauges of pool load and blob cache, in the Prometheus text format.
#include <doctest/doctest.h>

#include <sstream>

#include "kcoral/sha256.hpp"
#include "metrics.hpp"

namespace {

// The value on the line that starts with `name ` (or "" when there is none).
std::string sample(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + " ", 0) == 0) return line.substr(name.size() + 1);
  }
  return {};
}

std::string bucket(double le) {
  std::ostringstream out;
  out << "kcoral_execute_duration_seconds_bucket{le=\"" << le << "\"}";
  return out.str();
}

}  // namespace

TEST_SUITE("metrics") {

TEST_CASE("a fresh registry renders every series at zero, with HELP and TYPE lines") {
  kcoral::Metrics metrics;
  kcoral::BlobStore blobs(100);
  const std::string text = metrics.render({}, blobs);
  for (std::string_view outcome : kcoral::Metrics::kOutcomes)
    CHECK(sample(text, "kcoral_execute_requests_total{outcome=\"" + std::string(outcome) + "\"}") == "0");
  for (double le : kcoral::Metrics::kBucketsSeconds) CHECK(sample(text, bucket(le)) == "0");
  CHECK(sample(text, "kcoral_execute_duration_seconds_bucket{le=\"+Inf\"}") == "0");
  CHECK(sample(text, "kcoral_execute_duration_seconds_count") == "0");
  CHECK(std::stod(sample(text, "kcoral_execute_duration_seconds_sum")) == 0.0);
  CHECK(text.find("# TYPE kcoral_execute_requests_total counter\n") != std::string::npos);
  CHECK(text.find("# TYPE kcoral_execute_duration_seconds histogram\n") != std::string::npos);
  CHECK(text.find("# TYPE kcoral_queue_depth gauge\n") != std::string::npos);
  CHECK(text.back() == '\n');
}

TEST_CASE("outcomes are counted by label and unknown labels count as other") {
  kcoral::Metrics metrics;
  kcoral::BlobStore blobs(100);
  metrics.record_execute("completed", 0);
  metrics.record_execute("completed", 0);
  metrics.record_execute("timeout", 0);
  metrics.record_execute("made-up", 0);
  const std::string text = metrics.render({}, blobs);
  CHECK(sample(text, "kcoral_execute_requests_total{outcome=\"completed\"}") == "2");
  CHECK(sample(text, "kcoral_execute_requests_total{outcome=\"timeout\"}") == "1");
  CHECK(sample(text, "kcoral_execute_requests_total{outcome=\"other\"}") == "1");
  CHECK(sample(text, "kcoral_execute_requests_total{outcome=\"failed\"}") == "0");
  CHECK(sample(text, "kcoral_execute_duration_seconds_count") == "4");
}

TEST_CASE("retired workers are counted by the kind their reason names, anything else as other") {
  kcoral::Metrics metrics;
  kcoral::BlobStore blobs(100);
  metrics.record_worker_retired("threads: 3 after the program, 2 before");
  metrics.record_worker_retired("imported modules: +colorsys");
  metrics.record_worker_retired("threads");  // no detail
  // A worker writes its reason: one that names no kind, or hides a label's text, is other.
  metrics.record_worker_retired("other: x");
  metrics.record_worker_retired(std::string(1 << 20, 'A') + "threads: x");
  metrics.record_worker_retired("threads\"} 99\nkcoral_injected 1: x");
  metrics.record_worker_retired("");
  const std::string text = metrics.render({}, blobs);
  CHECK(sample(text, "kcoral_workers_retired_total{changed=\"threads\"}") == "2");
  CHECK(sample(text, "kcoral_workers_retired_total{changed=\"imported modules\"}") == "1");
  CHECK(sample(text, "kcoral_workers_retired_total{changed=\"descriptors\"}") == "0");
  CHECK(sample(text, "kcoral_workers_retired_total{changed=\"other\"}") == "4");
  CHECK(text.find("kcoral_injected") == std::string::npos);
  CHECK(text.size() < 100000);
}

TEST_CASE("the latency histogram is cumulative, bounds included") {
  kcoral::Metrics metrics;
  kcoral::BlobStore blobs(100);
  metrics.record_execute("completed", 0.001);  // on the first bound
  metrics.record_execute("completed", 0.3);
  metrics.record_execute("completed", 1000);  // beyond the last bound
  const std::string text = metrics.render({}, blobs);
  CHECK(sample(text, bucket(0.001)) == "1");
  CHECK(sample(text, bucket(0.25)) == "1");
  CHECK(sample(text, bucket(0.5)) == "2");
  CHECK(sample(text, bucket(900)) == "2");
  CHECK(sample(text, "kcoral_execute_duration_seconds_bucket{le=\"+Inf\"}") == "3");
  CHECK(std::stod(sample(text, "kcoral_execute_duration_seconds_sum")) == doctest::Approx(1000.301));
}

TEST_CASE("other requests and the gauges are rendered") {
  kcoral::Metrics metrics;
  kcoral::BlobStore blobs(1000);
  blobs.put("default", kcoral::sha256_hex("abc"), *kcoral::Blob::copy_of("abc"));
  blobs.put("default", kcoral::sha256_hex("de"), *kcoral::Blob::copy_of("de"));
  metrics.record_other_request();
  metrics.record_other_request();
  const std::string text = metrics.render({8, 3, 5, 6, 9}, blobs);
  CHECK(sample(text, "kcoral_other_requests_total") == "2");
  CHECK(sample(text, "kcoral_workers_capacity") == "8");
  CHECK(sample(text, "kcoral_workers_busy") == "3");
  CHECK(sample(text, "kcoral_queue_depth") == "5");
  CHECK(sample(text, "kcoral_gpus_busy") == "6");
  CHECK(sample(text, "kcoral_gpus_waiting") == "9");
  CHECK(sample(text, "kcoral_blob_cache_bytes") == "5");
  CHECK(sample(text, "kcoral_blob_cache_blobs") == "2");
}

TEST_CASE("the duration sum keeps its precision") {
  kcoral::Metrics metrics;
  kcoral::BlobStore blobs(100);
  metrics.record_execute("completed", 1234567.25);
  const std::string text = metrics.render({}, blobs);
  CHECK(std::stod(sample(text, "kcoral_execute_duration_seconds_sum")) == 1234567.25);
}

}  // TEST_SUITE
