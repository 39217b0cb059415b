// Loading the driver and CUPTI tables with dlopen/dlsym.
#include "cuda_api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <utility>

namespace kcoral::gpu {
namespace {

// Versioned names (cuMemAlloc is cuMemAlloc_v2) come from the headers' macros, so the
// symbol is the name after expansion.
#define KCORAL_EXPANDED_NAME(name) KCORAL_NAME_TEXT(name)
#define KCORAL_NAME_TEXT(name) #name
#define KCORAL_LOAD(table, handle, name)                                                       \
  table.name = reinterpret_cast<decltype(table.name)>(::dlsym(handle, KCORAL_EXPANDED_NAME(name))); \
  if (table.name == nullptr) return std::string("missing symbol ") + KCORAL_EXPANDED_NAME(name)

std::mutex mutex;
std::string error_text;

void* open_first(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (name == nullptr || *name == '\0') continue;
    if (void* handle = ::dlopen(name, RTLD_NOW | RTLD_GLOBAL)) return handle;
  }
  return nullptr;
}

std::string load_driver(DriverApi& api) {
  void* handle = open_first({"libcuda.so.1", "libcuda.so"});
  if (handle == nullptr) return std::string("no NVIDIA driver (libcuda.so.1): ") + ::dlerror();
  KCORAL_LOAD(api, handle, cuInit);
  KCORAL_LOAD(api, handle, cuDeviceGet);
  KCORAL_LOAD(api, handle, cuDeviceGetCount);
  KCORAL_LOAD(api, handle, cuDeviceGetAttribute);
  KCORAL_LOAD(api, handle, cuDeviceGetUuid);
  KCORAL_LOAD(api, handle, cuDevicePrimaryCtxRetain);
  KCORAL_LOAD(api, handle, cuDevicePrimaryCtxRelease);
  KCORAL_LOAD(api, handle, cuDevicePrimaryCtxGetState);
  KCORAL_LOAD(api, handle, cuCtxSetCurrent);
  KCORAL_LOAD(api, handle, cuCtxGetCurrent);
  KCORAL_LOAD(api, handle, cuCtxGetDevice);
  KCORAL_LOAD(api, handle, cuCtxSynchronize);
  KCORAL_LOAD(api, handle, cuMemAlloc);
  KCORAL_LOAD(api, handle, cuMemFree);
  KCORAL_LOAD(api, handle, cuMemsetD8Async);
  KCORAL_LOAD(api, handle, cuMemsetD32Async);
  KCORAL_LOAD(api, handle, cuMemcpyHtoD);
  KCORAL_LOAD(api, handle, cuGetErrorName);
  KCORAL_LOAD(api, handle, cuGetErrorString);
  return {};
}

std::string load_cupti(CuptiApi& api) {
  // The first found of: $KCORAL_CUPTI_LIBRARY (the operator's choice); the toolkit's CUPTI
  // found at build time, whose record layouts are the ones compiled in (empty in a wheel,
  // which names no path of the build machine); the one already loaded or on the loader's
  // path, by soname (torch's CUDA wheels bring it, and load it); the toolkit's usual places.
  void* handle = open_first({std::getenv("KCORAL_CUPTI_LIBRARY"), KCORAL_CUPTI_LIBRARY, "libcupti.so.13",
                             "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                             "/usr/local/cuda/lib64/libcupti.so.13", "libcupti.so"});
  if (handle == nullptr) return std::string("no CUPTI library: ") + ::dlerror();
  KCORAL_LOAD(api, handle, cuptiActivityRegisterCallbacks);
  KCORAL_LOAD(api, handle, cuptiActivityEnable);
  KCORAL_LOAD(api, handle, cuptiActivityDisable);
  KCORAL_LOAD(api, handle, cuptiActivityFlushAll);
  KCORAL_LOAD(api, handle, cuptiActivityGetNextRecord);
  KCORAL_LOAD(api, handle, cuptiGetTimestamp);
  KCORAL_LOAD(api, handle, cuptiSubscribe);
  KCORAL_LOAD(api, handle, cuptiUnsubscribe);
  KCORAL_LOAD(api, handle, cuptiEnableDomain);
  KCORAL_LOAD(api, handle, cuptiGetResultString);
  return {};
}

}  // namespace

const DriverApi* driver_api() {
  static const DriverApi* api = [] {
    static DriverApi table{};
    std::string problem = load_driver(table);
    std::lock_guard lock(mutex);
    if (!problem.empty()) error_text = problem;
    return problem.empty() ? &table : nullptr;
  }();
  return api;
}

const CuptiApi* cupti_api() {
  static const CuptiApi* api = [] {
    static CuptiApi table{};
    std::string problem = load_cupti(table);
    std::lock_guard lock(mutex);
    if (!problem.empty()) error_text = problem;
    return problem.empty() ? &table : nullptr;
  }();
  return api;
}

std::string load_error() {
  std::lock_guard lock(mutex);
  return error_text;
}

Result<PrimaryContext> PrimaryContext::retain(const DriverApi& cuda, int ordinal) {
  KCORAL_CU_TRY(cuda.cuInit(0));
  CUdevice device = 0;
  KCORAL_CU_TRY(cuda.cuDeviceGet(&device, ordinal));
  CUcontext context = nullptr;
  KCORAL_CU_TRY(cuda.cuDevicePrimaryCtxRetain(&context, device));
  return PrimaryContext(cuda, device, context);
}

PrimaryContext::PrimaryContext(PrimaryContext&& other) noexcept
    : cuda_(std::exchange(other.cuda_, nullptr)), device_(other.device_), context_(std::exchange(other.context_, nullptr)) {}

PrimaryContext& PrimaryContext::operator=(PrimaryContext&& other) noexcept {
  if (this != &other) {
    release();
    cuda_ = std::exchange(other.cuda_, nullptr);
    device_ = other.device_;
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

PrimaryContext::~PrimaryContext() { release(); }

void PrimaryContext::release() {
  // The driver may already be shut down at process exit; there is nothing left to release then.
  if (cuda_ != nullptr) (void)cuda_->cuDevicePrimaryCtxRelease(device_);
  cuda_ = nullptr;
  context_ = nullptr;
}

// "cuda->cuCtxSynchronize()" -> "cuCtxSynchronize"
std::string function_of(const char* call) {
  std::string text(call);
  text = text.substr(0, text.find('('));
  std::size_t arrow = text.rfind("->");
  return arrow == std::string::npos ? text : text.substr(arrow + 2);
}

std::string describe(CUresult result, const char* call) {
  const char* name = "CUDA_ERROR";
  const char* text = "";
  if (const DriverApi* api = driver_api()) {
    api->cuGetErrorName(result, &name);
    api->cuGetErrorString(result, &text);
  }
  return function_of(call) + ": " + (name ? name : "?") + " (" + (text ? text : "") + ")";
}

std::string describe(CUptiResult result, const char* call) {
  const char* text = "CUPTI error";
  if (const CuptiApi* api = cupti_api()) api->cuptiGetResultString(result, &text);
  return function_of(call) + ": " + (text ? text : "?");
}

}  // namespace kcoral::gpu
