// GPU inventory: the NVIDIA GPUs of this machine, as NVML lists them.
//
// Read without creating a CUDA context (the server's front must not hold one, and a
// process that forks workers must not either), so it goes through NVML, loaded at run
// time from the driver. Thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kcoral/error.hpp"

namespace kcoral {

struct GpuInfo {
  int index = 0;          // NVML's (and nvidia-smi's) device index
  std::string uuid;       // "GPU-…", what CUDA_VISIBLE_DEVICES accepts
  std::string name;
  int major = 0;          // compute capability
  int minor = 0;
  // "sm_<major><minor>", with the "a" suffix from compute capability 9 on: "sm_90a".
  [[nodiscard]] std::string arch() const;
};

// Every GPU NVML sees; an error (kind unavailable) when there is no driver.
[[nodiscard]] Result<std::vector<GpuInfo>> list_gpus();

// The SM clock of the GPU with this UUID, in MHz; nullopt without NVML.
[[nodiscard]] std::optional<unsigned> sm_clock_mhz(const std::string& uuid);

}  // namespace kcoral
