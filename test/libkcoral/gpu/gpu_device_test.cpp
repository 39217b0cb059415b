// make_gpu_device (libkcoral/src/gpu/gpu_device.cpp) on a machine without the NVIDIA
// driver: no GPU device is made, and the error, `unavailable`, is the loader's reason, so
// that a GPU executor on a machine without a driver says what is missing.
#include <doctest/doctest.h>

#include "device.hpp"
#include "libkcoral/gpu/gpu_support.hpp"

TEST_SUITE("gpu_device") {

TEST_CASE("without the NVIDIA driver no GPU device is made, and the loader's reason is the error" *
          doctest::skip(kcoral::test::nvidia_driver_installed())) {
  auto device = kcoral::make_gpu_device(nullptr);  // its Python support is never touched
  REQUIRE_FALSE(device.has_value());
  CHECK(device.error().kind == kcoral::ErrorKind::unavailable);
  CHECK(device.error().message.starts_with("no NVIDIA driver (libcuda.so.1): "));
}

}  // TEST_SUITE
