// ActivityRecorder (libkcoral/src/gpu/activity_recorder.cpp) on a GPU: CUPTI records while
// a Recording lives and stops when it goes, whichever way its scope ends, so nothing a
// process launches between two benchmark() calls is recorded. Needs the driver and a GPU:
// skipped elsewhere, run on the GPU machine.
#include <doctest/doctest.h>

#include <algorithm>

#include "gpu/activity_recorder.hpp"
#include "gpu/cuda_api.hpp"
#include "libkcoral/gpu/gpu_support.hpp"

namespace gpu = kcoral::gpu;

namespace {

std::size_t memsets(const std::vector<gpu::GpuActivity>& activities) {
  return static_cast<std::size_t>(std::count_if(activities.begin(), activities.end(), [](const gpu::GpuActivity& a) {
    return a.kind == gpu::GpuActivity::Kind::memset;
  }));
}

}  // namespace

TEST_SUITE("activity_recorder") {

TEST_CASE("CUPTI records while a recording lives, and nothing once it has gone" *
          doctest::skip(!kcoral::test::nvidia_driver_installed() || !kcoral::test::cupti_installed())) {
  const gpu::DriverApi* cuda = gpu::driver_api();
  REQUIRE(cuda != nullptr);
  auto context = gpu::PrimaryContext::retain(*cuda, 0);
  REQUIRE(context.has_value());
  REQUIRE(cuda->cuCtxSetCurrent(context->get()) == CUDA_SUCCESS);
  CUdeviceptr memory = 0;
  REQUIRE(cuda->cuMemAlloc(&memory, 4096) == CUDA_SUCCESS);
  auto memset_once = [&] {
    REQUIRE(cuda->cuMemsetD8Async(memory, 0, 4096, nullptr) == CUDA_SUCCESS);
    REQUIRE(cuda->cuCtxSynchronize() == CUDA_SUCCESS);
  };
  auto recorder = gpu::ActivityRecorder::get();
  REQUIRE(recorder.has_value());
  {
    auto recording = (*recorder)->record();
    REQUIRE(recording.has_value());
    memset_once();
    CHECK(memsets((*recorder)->collect()) == 1);
    memset_once();  // recorded, never collected: dropped with the recording
  }
  memset_once();  // no recording: not recorded
  {
    auto recording = (*recorder)->record();
    REQUIRE(recording.has_value());
    CHECK((*recorder)->collect().empty());
    memset_once();
    CHECK(memsets((*recorder)->collect()) == 1);
  }
  CHECK(cuda->cuMemFree(memory) == CUDA_SUCCESS);
  CHECK(cuda->cuCtxSetCurrent(nullptr) == CUDA_SUCCESS);
}

}  // TEST_SUITE
