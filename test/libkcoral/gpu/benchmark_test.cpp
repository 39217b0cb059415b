// run_benchmark (libkcoral/src/gpu/benchmark.cpp) on a machine without the NVIDIA driver:
// it fails `unavailable`, saying a GPU is needed and why the driver is not there, before
// the measured function is called even once, whatever the budgets or counts. (The timing
// itself, and the statistics made of it, need a GPU: test/python/gpu covers them.)
#include <doctest/doctest.h>

#include "kcoral/benchmark.hpp"
#include "libkcoral/gpu/gpu_support.hpp"

TEST_SUITE("benchmark") {

TEST_CASE("without the NVIDIA driver a benchmark fails unavailable, before its function is called" *
          doctest::skip(kcoral::test::nvidia_driver_installed())) {
  int calls = 0;
  kcoral::gpu::BenchmarkCall call = [&]() -> kcoral::Status {
    ++calls;
    return {};
  };
  kcoral::gpu::BenchmarkConfig counted;
  counted.warmup = 0;
  counted.repeat = 3;
  for (const kcoral::gpu::BenchmarkConfig& config : {kcoral::gpu::BenchmarkConfig{}, counted}) {
    auto report = kcoral::gpu::run_benchmark(call, config);
    REQUIRE_FALSE(report.has_value());
    CHECK(report.error().kind == kcoral::ErrorKind::unavailable);
    CHECK(report.error().message.starts_with("benchmark needs a GPU: no NVIDIA driver (libcuda.so.1): "));
  }
  CHECK(calls == 0);
  kcoral::gpu::prepare_benchmark();  // nothing to prepare: returns, and calls nothing
  CHECK(calls == 0);
}

}  // TEST_SUITE
