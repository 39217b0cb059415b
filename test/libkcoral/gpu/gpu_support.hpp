// For the tests of libkcoral/src/gpu without a GPU: whether this machine has the NVIDIA
// driver's library, asked of the loader itself (not of the code under test), so that a
// test about the driver's absence is skipped where it is installed.
#pragma once

#include <dlfcn.h>

namespace kcoral::test {

inline bool nvidia_driver_installed() {
  static const bool installed = [] {
    void* handle = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (handle == nullptr) handle = ::dlopen("libcuda.so", RTLD_LAZY | RTLD_LOCAL);
    if (handle != nullptr) ::dlclose(handle);
    return handle != nullptr;
  }();
  return installed;
}

inline bool cupti_installed() {
  static const bool installed = [] {
    void* handle = ::dlopen("libcupti.so.13", RTLD_LAZY | RTLD_LOCAL);
    if (handle == nullptr) handle = ::dlopen("libcupti.so", RTLD_LAZY | RTLD_LOCAL);
    if (handle != nullptr) ::dlclose(handle);
    return handle != nullptr;
  }();
  return installed;
}

}  // namespace kcoral::test
