// GpuAccessGuard: notices CUDA driver and runtime calls made while a cpu_only function
// runs, through a CUPTI callback subscription held only for that call.
//
// Queries that do not use the GPU (cuInit, device counts and attributes, versions, error
// names, entry-point lookups) are allowed, and so is anything they call inside. NVRTC is
// not a CUDA API and is never seen. The first other call is recorded with the uploaded
// code's file and line; the call itself proceeds (CUPTI cannot refuse it), and the
// executor fails the instruction afterwards. Best effort: a call made by a child process
// is not seen, nor one made while another tool holds CUPTI's only subscriber slot.
// Not thread-safe beyond CUPTI's own callbacks.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <cupti.h>

#include "kcoral/error.hpp"
#include "kcoral/program_result.hpp"

namespace kcoral::gpu {

struct GpuAccessRecord {
  GpuAccessDetail detail;
  std::string stack;  // the Python stack at the call, innermost last
};

class GpuAccessGuard {
 public:
  // Starts watching. `uploaded_code_dir` is where uploaded modules live (to find the
  // location in the user's code); `on_violation` runs once, inside the CUDA call.
  [[nodiscard]] static Result<std::unique_ptr<GpuAccessGuard>> watch(
      std::string uploaded_code_dir, std::function<void(const GpuAccessDetail&)> on_violation);
  GpuAccessGuard(const GpuAccessGuard&) = delete;
  GpuAccessGuard& operator=(const GpuAccessGuard&) = delete;
  ~GpuAccessGuard();

  [[nodiscard]] std::optional<GpuAccessRecord> violation() const;

 private:
  GpuAccessGuard() = default;
  static void CUPTIAPI on_api_call(void* self, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                   const void* data) noexcept;
  void record(const char* function_name) noexcept;

  void* subscriber_ = nullptr;
  std::string uploaded_code_dir_;
  std::function<void(const GpuAccessDetail&)> on_violation_;
  std::atomic<bool> violated_{false};
  mutable std::mutex mutex_;
  std::optional<GpuAccessRecord> record_;
};

}  // namespace kcoral::gpu
