// GpuAccessGuard (libkcoral/src/gpu/gpu_access_guard.cpp) on a machine without the NVIDIA
// driver: CUPTI loads but refuses a callback subscription, so watch() fails as a value
// naming CUPTI's refusal (the executor then runs cpu_only functions unwatched, best
// effort) and no guard is left half made. Which calls the guard allows, and where it
// finds them in the uploaded code, need a driver whose calls CUPTI reports: the GPU tests
// (test/python/gpu) cover them.
#include <doctest/doctest.h>

#include "gpu/cuda_api.hpp"
#include "gpu/gpu_access_guard.hpp"
#include "libkcoral/gpu/gpu_support.hpp"

TEST_SUITE("gpu_access_guard") {

TEST_CASE("without the NVIDIA driver watching fails as a value, and nothing is reported" *
          doctest::skip(kcoral::test::nvidia_driver_installed())) {
  int violations = 0;
  auto guard = kcoral::gpu::GpuAccessGuard::watch("/nowhere", [&](const kcoral::GpuAccessDetail&) { ++violations; });
  REQUIRE_FALSE(guard.has_value());
  if (kcoral::gpu::cupti_api() == nullptr) {
    CHECK(guard.error().kind == kcoral::ErrorKind::unavailable);
    CHECK(guard.error().message.starts_with("CUPTI is not available: "));
  } else {
    CHECK(guard.error().kind == kcoral::ErrorKind::runtime);
    CHECK(guard.error().message.starts_with("cuptiSubscribe: CUPTI_ERROR_"));
  }
  CHECK(violations == 0);
}

}  // TEST_SUITE
