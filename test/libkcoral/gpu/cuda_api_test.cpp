// cuda_api (libkcoral/src/gpu/cuda_api.cpp) on a machine without the NVIDIA driver: the
// driver's table is absent and load_error() says why, the same on every call; describe()
// names a failed call by its function, whatever expression made it, with the API's own
// error name where the library is there to give it (CUPTI's, which loads without a
// driver); the checking macros return a `runtime` error with that text and pass success
// through. Tests about the driver's absence are skipped where it is installed; those of a
// primary context's owner need the driver and a GPU, and run on the GPU machine.
#include <doctest/doctest.h>

#include "gpu/cuda_api.hpp"
#include "libkcoral/gpu/gpu_support.hpp"

namespace gpu = kcoral::gpu;

namespace {

// Returns `result` as a driver or CUPTI call would, for the checking macros to check.
template <class R>
R answering(R result) {
  return result;
}

kcoral::Status checked_cu(CUresult result) {
  KCORAL_CU_TRY(answering(result));
  return {};
}

kcoral::Status checked_cupti(CUptiResult result) {
  KCORAL_CUPTI_TRY(answering(result));
  return {};
}

}  // namespace

TEST_SUITE("cuda_api") {

TEST_CASE("without the NVIDIA driver the driver's table is absent, and load_error says why, every time" *
          doctest::skip(kcoral::test::nvidia_driver_installed())) {
  CHECK(gpu::driver_api() == nullptr);
  std::string why = gpu::load_error();
  CHECK(why.starts_with("no NVIDIA driver (libcuda.so.1): "));
  CHECK(why.find("libcuda.so") != std::string::npos);  // the loader's own words follow
  CHECK(gpu::driver_api() == nullptr);
  CHECK(gpu::load_error() == why);
}

TEST_CASE("describe names a failed driver call by its function, whatever expression made it") {
  std::string described = gpu::describe(CUDA_ERROR_INVALID_VALUE, "cuda->cuMemAlloc(&pointer, 2 * bytes)");
  CHECK(described.starts_with("cuMemAlloc: CUDA_ERROR"));
  CHECK(gpu::describe(CUDA_ERROR_INVALID_VALUE, "cuCtxSynchronize").starts_with("cuCtxSynchronize: CUDA_ERROR"));
  CHECK(gpu::describe(CUDA_ERROR_INVALID_VALUE, "api.table->cuInit(0)").starts_with("cuInit: CUDA_ERROR"));
  if (gpu::driver_api() == nullptr)  // no driver to name the error: said so plainly
    CHECK(described == "cuMemAlloc: CUDA_ERROR ()");
  else
    CHECK(described == "cuMemAlloc: CUDA_ERROR_INVALID_VALUE (invalid argument)");
}

TEST_CASE("CUPTI loads without a driver and names its own errors" * doctest::skip(!kcoral::test::cupti_installed())) {
  REQUIRE(gpu::cupti_api() != nullptr);
  CHECK(gpu::describe(CUPTI_ERROR_INVALID_PARAMETER, "cupti->cuptiActivityFlushAll(0)") ==
        "cuptiActivityFlushAll: CUPTI_ERROR_INVALID_PARAMETER");
  CHECK(gpu::describe(CUPTI_ERROR_NOT_INITIALIZED, "cuptiSubscribe(&subscriber, callback, this)") ==
        "cuptiSubscribe: CUPTI_ERROR_NOT_INITIALIZED");
}

TEST_CASE("the checking macros return a runtime error naming the call, and let success through") {
  CHECK(checked_cu(CUDA_SUCCESS).has_value());
  auto failed = checked_cu(CUDA_ERROR_OUT_OF_MEMORY);
  REQUIRE_FALSE(failed.has_value());
  CHECK(failed.error().kind == kcoral::ErrorKind::runtime);
  CHECK(failed.error().message.starts_with("answering: CUDA_ERROR"));

  CHECK(checked_cupti(CUPTI_SUCCESS).has_value());
  auto refused = checked_cupti(CUPTI_ERROR_INVALID_PARAMETER);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().kind == kcoral::ErrorKind::runtime);
  CHECK(refused.error().message.starts_with("answering: "));
  if (gpu::cupti_api() != nullptr) CHECK(refused.error().message == "answering: CUPTI_ERROR_INVALID_PARAMETER");
}

TEST_CASE("a primary context is held while its one owner lives, and released when it goes" *
          doctest::skip(!kcoral::test::nvidia_driver_installed())) {
  const gpu::DriverApi* cuda = gpu::driver_api();
  REQUIRE(cuda != nullptr);
  auto active = [&] {
    CUdevice device = 0;
    unsigned flags = 0;
    int is_active = 0;
    REQUIRE(cuda->cuDeviceGet(&device, 0) == CUDA_SUCCESS);
    REQUIRE(cuda->cuDevicePrimaryCtxGetState(device, &flags, &is_active) == CUDA_SUCCESS);
    return is_active != 0;
  };
  {
    auto first = gpu::PrimaryContext::retain(*cuda, 0);
    REQUIRE(first.has_value());
    CHECK(first->get() != nullptr);
    CHECK(active());
    CUcontext context = first->get();
    gpu::PrimaryContext moved = std::move(*first);  // the retain moves; the one left holds nothing
    CHECK(first->get() == nullptr);
    CHECK(moved.get() == context);
    first = std::unexpected(kcoral::Error{kcoral::ErrorKind::runtime, "gone"});  // releases nothing
    CHECK(active());
  }
  CHECK_FALSE(active());  // the one retain, released once
}

}  // TEST_SUITE
