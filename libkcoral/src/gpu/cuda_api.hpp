// The CUDA driver and CUPTI entry points libkcoral uses, loaded at run time.
//
// Nothing links against libcuda or libcupti: a build with CUDA must still start, and
// serve CPU programs, on a machine without an NVIDIA driver. The tables are loaded on
// first use (dlopen) and stay for the life of the process. Thread-safe.
//
//   const DriverApi* cuda = driver_api();
//   if (!cuda) return fail(...);
//   KCORAL_CU_TRY(cuda->cuCtxSynchronize());
#pragma once

#include <cuda.h>
#include <cupti.h>

#include <string>

#include "kcoral/error.hpp"

namespace kcoral::gpu {

struct DriverApi {
  decltype(&::cuInit) cuInit;
  decltype(&::cuDeviceGet) cuDeviceGet;
  decltype(&::cuDeviceGetCount) cuDeviceGetCount;
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute;
  decltype(&::cuDeviceGetUuid) cuDeviceGetUuid;
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain;
  decltype(&::cuDevicePrimaryCtxRelease) cuDevicePrimaryCtxRelease;
  decltype(&::cuDevicePrimaryCtxGetState) cuDevicePrimaryCtxGetState;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent;
  decltype(&::cuCtxGetDevice) cuCtxGetDevice;
  decltype(&::cuCtxSynchronize) cuCtxSynchronize;
  decltype(&::cuMemAlloc) cuMemAlloc;
  decltype(&::cuMemFree) cuMemFree;
  decltype(&::cuMemsetD8Async) cuMemsetD8Async;
  decltype(&::cuMemsetD32Async) cuMemsetD32Async;
  decltype(&::cuMemcpyHtoD) cuMemcpyHtoD;
  decltype(&::cuGetErrorName) cuGetErrorName;
  decltype(&::cuGetErrorString) cuGetErrorString;
};

struct CuptiApi {
  decltype(&::cuptiActivityRegisterCallbacks) cuptiActivityRegisterCallbacks;
  decltype(&::cuptiActivityEnable) cuptiActivityEnable;
  decltype(&::cuptiActivityDisable) cuptiActivityDisable;
  decltype(&::cuptiActivityFlushAll) cuptiActivityFlushAll;
  decltype(&::cuptiActivityGetNextRecord) cuptiActivityGetNextRecord;
  decltype(&::cuptiGetTimestamp) cuptiGetTimestamp;
  decltype(&::cuptiSubscribe) cuptiSubscribe;
  decltype(&::cuptiUnsubscribe) cuptiUnsubscribe;
  decltype(&::cuptiEnableDomain) cuptiEnableDomain;
  decltype(&::cuptiGetResultString) cuptiGetResultString;
};

// nullptr when the library cannot be loaded; load_error() then says why.
[[nodiscard]] const DriverApi* driver_api();
[[nodiscard]] const CuptiApi* cupti_api();
[[nodiscard]] std::string load_error();

// A device's primary context (the one torch, Triton and TVM share), retained while this
// lives and released when it goes. Move-only: each retain has exactly one release.
class PrimaryContext {
 public:
  [[nodiscard]] static Result<PrimaryContext> retain(const DriverApi& cuda, int ordinal);
  PrimaryContext(PrimaryContext&& other) noexcept;
  PrimaryContext& operator=(PrimaryContext&& other) noexcept;
  ~PrimaryContext();

  [[nodiscard]] CUcontext get() const { return context_; }

 private:
  PrimaryContext(const DriverApi& cuda, CUdevice device, CUcontext context)
      : cuda_(&cuda), device_(device), context_(context) {}
  void release();

  const DriverApi* cuda_ = nullptr;  // nullptr once released or moved from
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

// "cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)"
[[nodiscard]] std::string describe(CUresult result, const char* call);
[[nodiscard]] std::string describe(CUptiResult result, const char* call);

}  // namespace kcoral::gpu

// The one checking macro of each API family: on failure, return the error (kind
// `runtime`) from the enclosing function, which must return a Status or Result.
#define KCORAL_CU_TRY(call)                                                                  \
  do {                                                                                        \
    if (CUresult kcoral_result_ = (call); kcoral_result_ != CUDA_SUCCESS)                     \
      return ::kcoral::fail(::kcoral::ErrorKind::runtime, ::kcoral::gpu::describe(kcoral_result_, #call)); \
  } while (false)
#define KCORAL_CUPTI_TRY(call)                                                               \
  do {                                                                                        \
    if (CUptiResult kcoral_result_ = (call); kcoral_result_ != CUPTI_SUCCESS)                 \
      return ::kcoral::fail(::kcoral::ErrorKind::runtime, ::kcoral::gpu::describe(kcoral_result_, #call)); \
  } while (false)
