// ActivityRecorder: GPU activity (kernels, copies, memsets) as CUPTI records it.
//
// CUPTI's activity API has one set of buffer callbacks per process, so there is one
// recorder per process. It needs no subscriber: it coexists with the GpuAccessGuard's
// callback subscription. Recording is on while a Recording from record() lives; collect()
// forces CUPTI to hand over what it has and returns the records gathered since the last
// collect(). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kcoral/error.hpp"

namespace kcoral::gpu {

struct GpuActivity {
  enum class Kind { kernel, memcpy, memset };
  Kind kind = Kind::kernel;
  std::uint64_t start_ns = 0;  // CUPTI's clock (cuptiGetTimestamp)
  std::uint64_t end_ns = 0;
  std::string name;  // kernel name; "memcpy"/"memset" otherwise
  std::uint32_t device = 0;  // the CUDA device (ordinal) it ran on
  std::uint32_t stream = 0;  // CUPTI's id of the stream it ran on (unique within its context)
  std::uint64_t bytes = 0;   // copies and memsets: how many
  std::uint32_t value = 0;   // memsets: the value written
};

class ActivityRecorder {
 public:
  class Recording;

  // The process's recorder; fails when CUPTI cannot be loaded or set up.
  [[nodiscard]] static Result<ActivityRecorder*> get();

  // Records from now until the returned Recording goes.
  [[nodiscard]] Result<Recording> record();
  [[nodiscard]] std::vector<GpuActivity> collect();
  // The current CUPTI timestamp, on the clock of the records.
  [[nodiscard]] std::uint64_t now_ns() const;
  // The thread CUPTI started to take its filled buffers, by id, once a Recording that
  // filled one has ended: the one thread that appeared while the first such Recording
  // lived (none when the recorded function started threads of its own too). Empty before.
  [[nodiscard]] static std::vector<int> started_threads();

 private:
  ActivityRecorder() = default;
};

// CUPTI records while one lives: the activity kinds record() enabled are disabled, and
// what was recorded but not collected dropped, when it goes, however its scope ends.
class ActivityRecorder::Recording {
 public:
  Recording(Recording&& other) noexcept;
  Recording& operator=(Recording&&) = delete;
  ~Recording();

 private:
  friend class ActivityRecorder;
  Recording() = default;

  std::size_t enabled_ = 0;  // how many of the recorded kinds are on; 0 once moved from
  // Until CUPTI's thread is known: the process's threads, and the buffers filled, when
  // this Recording began.
  std::vector<int> threads_before_;
  std::uint64_t buffers_before_ = 0;
};

}  // namespace kcoral::gpu
