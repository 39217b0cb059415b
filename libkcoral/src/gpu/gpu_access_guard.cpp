// GpuAccessGuard: a CUPTI subscriber on the driver and runtime API domains.
#include "gpu_access_guard.hpp"

#include <array>
#include <string_view>

#include "cuda_api.hpp"
#include "frames.hpp"

namespace kcoral::gpu {
namespace {

// Calls that answer questions about the driver or a device without using the GPU.
constexpr std::array<std::string_view, 44> kAllowed{
    "cuInit", "cuDriverGetVersion", "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetName",
    "cuDeviceGetUuid", "cuDeviceGetUuid_v2", "cuDeviceGetLuid", "cuDeviceTotalMem",
    "cuDeviceTotalMem_v2", "cuDeviceGetAttribute", "cuDeviceGetProperties",
    "cuDeviceComputeCapability", "cuDeviceGetPCIBusId", "cuDeviceGetByPCIBusId",
    "cuDevicePrimaryCtxGetState", "cuGetErrorName", "cuGetErrorString", "cuGetProcAddress",
    "cuGetProcAddress_v2", "cuGetExportTable", "cuModuleGetLoadingMode", "cuCtxGetCurrent",
    "cuCtxGetDevice", "cuDeviceGetNvSciSyncAttributes", "cuDeviceGetExecAffinitySupport",
    "cudaGetDeviceCount", "cudaGetDeviceProperties", "cudaGetDeviceProperties_v2",
    "cudaDeviceGetAttribute", "cudaDriverGetVersion", "cudaRuntimeGetVersion", "cudaGetErrorName",
    "cudaGetErrorString", "cudaGetLastError", "cudaPeekAtLastError", "cudaGetDevice",
    "cudaDeviceGetPCIBusId", "cudaDeviceGetByPCIBusId", "cudaGetDriverEntryPoint",
    "cudaGetDriverEntryPointByVersion", "cudaChooseDevice", "cudaGetDeviceFlags",
    "cudaDeviceGetDefaultMemPool"};

bool allowed(const char* name) {
  if (name == nullptr) return false;
  std::string_view text(name);
  for (std::string_view entry : kAllowed)
    if (entry == text) return true;
  return false;
}

// Inside an allowed runtime call, the driver calls it makes are its business.
thread_local int allowed_depth = 0;

// The innermost frame of uploaded code as "file:line", and the whole stack as text.
std::pair<std::string, std::string> python_location(const std::string& uploaded_code_dir) {
  std::string location;
  std::string stack;
  for (const cpython::Frame& frame : cpython::current_frames()) {
    stack += "  File \"" + frame.file + "\", line " + std::to_string(frame.line) + ", in " + frame.function + "\n";
    if (frame.file.starts_with(uploaded_code_dir))
      location = frame.file.substr(frame.file.rfind('/') + 1) + ":" + std::to_string(frame.line);
  }
  if (stack.empty()) return {"native code (no Python frame)", ""};
  return {location.empty() ? "outside the uploaded code" : location, stack};
}

}  // namespace

Result<std::unique_ptr<GpuAccessGuard>> GpuAccessGuard::watch(
    std::string uploaded_code_dir, std::function<void(const GpuAccessDetail&)> on_violation) {
  const CuptiApi* cupti = cupti_api();
  if (cupti == nullptr) return fail(ErrorKind::unavailable, "CUPTI is not available: " + load_error());
  std::unique_ptr<GpuAccessGuard> guard(new GpuAccessGuard());
  guard->uploaded_code_dir_ = std::move(uploaded_code_dir);
  guard->on_violation_ = std::move(on_violation);
  CUpti_SubscriberHandle subscriber = nullptr;
  KCORAL_CUPTI_TRY(cupti->cuptiSubscribe(&subscriber, &GpuAccessGuard::on_api_call, guard.get()));
  guard->subscriber_ = subscriber;
  KCORAL_CUPTI_TRY(cupti->cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API));
  KCORAL_CUPTI_TRY(cupti->cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API));
  return guard;
}

GpuAccessGuard::~GpuAccessGuard() {
  if (subscriber_ != nullptr)
    (void)cupti_api()->cuptiUnsubscribe(static_cast<CUpti_SubscriberHandle>(subscriber_));
}

std::optional<GpuAccessRecord> GpuAccessGuard::violation() const {
  std::lock_guard lock(mutex_);
  return record_;
}

void CUPTIAPI GpuAccessGuard::on_api_call(void* self, CUpti_CallbackDomain domain, CUpti_CallbackId,
                                          const void* data) noexcept {
  auto* guard = static_cast<GpuAccessGuard*>(self);
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  bool entering = info->callbackSite == CUPTI_API_ENTER;
  bool is_allowed = allowed(info->functionName);
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && is_allowed) {
    allowed_depth += entering ? 1 : -1;
    return;
  }
  if (!entering || is_allowed || allowed_depth > 0 || guard->violated_.exchange(true)) return;
  guard->record(info->functionName);
}

void GpuAccessGuard::record(const char* function_name) noexcept {
  try {
    auto [location, stack] = python_location(uploaded_code_dir_);
    GpuAccessRecord found{{function_name != nullptr ? function_name : "a CUDA call", location, std::nullopt},
                          stack};
    {
      std::lock_guard lock(mutex_);
      record_ = found;
    }
    if (on_violation_) on_violation_(found.detail);
  } catch (...) {
    // Nothing may escape into CUDA; the flag is set, the detail is lost.
  }
}

}  // namespace kcoral::gpu
