// GPU inventory through NVML, declared here: the CUDA toolkit ships no nvml.h, and these
// few calls are a stable C interface of the driver.
#include "kcoral/gpu_inventory.hpp"

#include <dlfcn.h>

namespace kcoral {
namespace {

using NvmlDevice = void*;
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;

struct Nvml {
  int (*init)();
  int (*count)(unsigned*);
  int (*by_index)(unsigned, NvmlDevice*);
  int (*by_uuid)(const char*, NvmlDevice*);
  int (*uuid)(NvmlDevice, char*, unsigned);
  int (*name)(NvmlDevice, char*, unsigned);
  int (*capability)(NvmlDevice, int*, int*);
  int (*clock)(NvmlDevice, int, unsigned*);
};

template <class F>
F symbol(void* library, const char* name) {
  return reinterpret_cast<F>(::dlsym(library, name));
}

const Nvml* nvml() {
  static const Nvml* api = []() -> const Nvml* {
    void* library = ::dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (library == nullptr) return nullptr;
    static Nvml table{symbol<int (*)()>(library, "nvmlInit_v2"),
                      symbol<int (*)(unsigned*)>(library, "nvmlDeviceGetCount_v2"),
                      symbol<int (*)(unsigned, NvmlDevice*)>(library, "nvmlDeviceGetHandleByIndex_v2"),
                      symbol<int (*)(const char*, NvmlDevice*)>(library, "nvmlDeviceGetHandleByUUID"),
                      symbol<int (*)(NvmlDevice, char*, unsigned)>(library, "nvmlDeviceGetUUID"),
                      symbol<int (*)(NvmlDevice, char*, unsigned)>(library, "nvmlDeviceGetName"),
                      symbol<int (*)(NvmlDevice, int*, int*)>(library, "nvmlDeviceGetCudaComputeCapability"),
                      symbol<int (*)(NvmlDevice, int, unsigned*)>(library, "nvmlDeviceGetClockInfo")};
    bool complete = table.init && table.count && table.by_index && table.by_uuid && table.uuid &&
                    table.name && table.capability && table.clock;
    return complete && table.init() == kNvmlSuccess ? &table : nullptr;
  }();
  return api;
}

}  // namespace

std::string GpuInfo::arch() const {
  return "sm_" + std::to_string(major) + std::to_string(minor) + (major >= 9 ? "a" : "");
}

Result<std::vector<GpuInfo>> list_gpus() {
  const Nvml* api = nvml();
  if (api == nullptr) return fail(ErrorKind::unavailable, "no NVIDIA driver here (NVML, libnvidia-ml.so.1, is missing)");
  unsigned count = 0;
  if (api->count(&count) != kNvmlSuccess) return fail(ErrorKind::unavailable, "NVML cannot count the GPUs");
  std::vector<GpuInfo> gpus;
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    char uuid[96] = {}, name[96] = {};
    GpuInfo info;
    info.index = static_cast<int>(i);
    if (api->by_index(i, &device) != kNvmlSuccess || api->uuid(device, uuid, sizeof uuid) != kNvmlSuccess ||
        api->capability(device, &info.major, &info.minor) != kNvmlSuccess)
      return fail(ErrorKind::unavailable, "NVML cannot describe GPU " + std::to_string(i));
    (void)api->name(device, name, sizeof name);
    info.uuid = uuid;
    info.name = name;
    gpus.push_back(std::move(info));
  }
  return gpus;
}

std::optional<unsigned> sm_clock_mhz(const std::string& uuid) {
  const Nvml* api = nvml();
  NvmlDevice device = nullptr;
  unsigned mhz = 0;
  if (api == nullptr || api->by_uuid(uuid.c_str(), &device) != kNvmlSuccess ||
      api->clock(device, kNvmlClockSm, &mhz) != kNvmlSuccess)
    return std::nullopt;
  return mhz;
}

}  // namespace kcoral
