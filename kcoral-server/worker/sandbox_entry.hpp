// Sandbox::enter's steps (sandbox.hpp): what a forked worker does, in this order, to
// enter its sandbox. Namespaces; a new root of read-only binds (the system's paths, parts
// of /sys, the interpreter's and the operator's paths) with a private scratch tmpfs, a
// small /dev and its own /proc; pivot into it; only the kept descriptors open; an
// unprivileged user in a user namespace the zygote maps; the process limits. Each step
// returns what failed; the worker then reports it and exits.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

struct SandboxConfig;

namespace sandbox_entry {

// A GPU as the driver's /proc files name it.
struct NvidiaGpu {
  int minor = 0;        // of /dev/nvidia<minor>
  std::string bus_id;   // its PCI address, 0000:00:06.0
};
// The GPUs that `visible_devices` (CUDA_VISIBLE_DEVICES: UUIDs joined by commas, as the
// server sets it) names, in its order, as the driver's /proc files (`driver_gpus`: one
// directory per GPU) list them; an error naming the first UUID that is not there. None for
// an empty list.
[[nodiscard]] Result<std::vector<NvidiaGpu>> find_gpus(const std::string& visible_devices,
                                                       const std::string& driver_gpus = "/proc/driver/nvidia/gpus");

// `path` and its missing parents.
[[nodiscard]] Status make_directories(const std::string& path);

// The steps, in order. `root`: where the new root is built (SandboxConfig::root_mountpoint);
// `gpu_worker`: a GPU server's worker, which gets the NVIDIA nodes and modules and those of
// its `gpus` (its program's GPUs, and no other).
[[nodiscard]] Status enter_namespaces();
[[nodiscard]] Status mount_system(const std::string& root, bool gpu_worker, const std::vector<NvidiaGpu>& gpus);
[[nodiscard]] Status mount_scratch(const std::string& root, std::uint64_t scratch_bytes, uid_t owner);
[[nodiscard]] Status mount_readable(const std::string& root, const std::vector<std::string>& readable);
[[nodiscard]] Status mount_var(const std::string& root);
[[nodiscard]] Status mount_dev(const std::string& root, bool gpu_worker, const std::vector<NvidiaGpu>& gpus);
[[nodiscard]] Status mount_proc(const std::string& root);
[[nodiscard]] Status pivot_into(const std::string& root);
[[nodiscard]] Status keep_only(std::vector<int> keep);
[[nodiscard]] Status become_unprivileged(std::optional<uid_t> outside_user, UniqueFd admit);
[[nodiscard]] Status apply_limits(const SandboxConfig& config);

}  // namespace sandbox_entry
}  // namespace kcoral
