// ActivityRecorder: CUPTI buffer callbacks that copy out the few fields timing needs.
#include "activity_recorder.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <mutex>
#include <utility>

#include "cuda_api.hpp"

namespace kcoral::gpu {
namespace {

// Large buffers: CUPTI asks for a new one inside a launch, which would stretch that call.
constexpr std::size_t kBufferBytes = 64u << 20;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET};

std::mutex records_mutex;
std::vector<GpuActivity> records;
std::atomic<std::uint64_t> buffers_filled{0};

std::mutex threads_mutex;
bool threads_known = false;        // CUPTI's thread found, or given up on
std::vector<int> started_thread;   // its id, once found

// This process's threads, by id, sorted.
std::vector<int> thread_ids() {
  std::vector<int> ids;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", error)) {
    int id = 0;
    const std::string name = entry.path().filename().string();
    if (std::from_chars(name.data(), name.data() + name.size(), id).ec == std::errc()) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) noexcept {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) noexcept {
  const CuptiApi* cupti = cupti_api();
  std::vector<GpuActivity> found;
  CUpti_Activity* record = nullptr;
  while (cupti != nullptr &&
         cupti->cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* kernel = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        found.push_back({GpuActivity::Kind::kernel, kernel->start, kernel->end,
                         kernel->name != nullptr ? kernel->name : "kernel", kernel->deviceId, kernel->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* copy = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
        found.push_back(
            {GpuActivity::Kind::memcpy, copy->start, copy->end, "memcpy", copy->deviceId, copy->streamId, copy->bytes});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        auto* copy = reinterpret_cast<CUpti_ActivityMemcpyPtoP4*>(record);
        found.push_back(
            {GpuActivity::Kind::memcpy, copy->start, copy->end, "memcpy", copy->deviceId, copy->streamId, copy->bytes});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* set = reinterpret_cast<CUpti_ActivityMemset4*>(record);
        found.push_back({GpuActivity::Kind::memset, set->start, set->end, "memset", set->deviceId, set->streamId,
                         set->bytes, set->value});
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
  if (valid_bytes > 0) ++buffers_filled;  // a forced flush may hand back an empty one
  std::lock_guard lock(records_mutex);
  records.insert(records.end(), std::make_move_iterator(found.begin()), std::make_move_iterator(found.end()));
}

}  // namespace

Result<ActivityRecorder*> ActivityRecorder::get() {
  static Result<ActivityRecorder*> recorder = []() -> Result<ActivityRecorder*> {
    const CuptiApi* cupti = cupti_api();
    if (cupti == nullptr) return fail(ErrorKind::unavailable, "CUPTI is not available: " + load_error());
    KCORAL_CUPTI_TRY(cupti->cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    static ActivityRecorder instance;
    return &instance;
  }();
  return recorder;
}

Result<ActivityRecorder::Recording> ActivityRecorder::record() {
  const CuptiApi* cupti = cupti_api();
  Recording recording;
  if (std::lock_guard lock(threads_mutex); !threads_known) {
    recording.threads_before_ = thread_ids();
    recording.buffers_before_ = buffers_filled.load();
  }
  for (CUpti_ActivityKind kind : kKinds) {
    KCORAL_CUPTI_TRY(cupti->cuptiActivityEnable(kind));  // the kinds already on go off with `recording`
    ++recording.enabled_;
  }
  (void)collect();
  return recording;
}

ActivityRecorder::Recording::Recording(Recording&& other) noexcept
    : enabled_(std::exchange(other.enabled_, 0)),
      threads_before_(std::move(other.threads_before_)),
      buffers_before_(other.buffers_before_) {}

ActivityRecorder::Recording::~Recording() {
  if (enabled_ == 0) return;
  const CuptiApi* cupti = cupti_api();
  for (std::size_t i = 0; i < enabled_; ++i) (void)cupti->cuptiActivityDisable(kKinds[i]);
  (void)cupti->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    std::lock_guard lock(records_mutex);
    records.clear();
  }
  if (threads_before_.empty() || buffers_filled.load() == buffers_before_) return;
  std::vector<int> after = thread_ids(), started;
  std::set_difference(after.begin(), after.end(), threads_before_.begin(), threads_before_.end(),
                      std::back_inserter(started));
  std::lock_guard lock(threads_mutex);
  if (threads_known) return;
  threads_known = true;
  if (started.size() == 1) started_thread = started;
}

std::vector<int> ActivityRecorder::started_threads() {
  std::lock_guard lock(threads_mutex);
  return started_thread;
}

std::vector<GpuActivity> ActivityRecorder::collect() {
  (void)cupti_api()->cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard lock(records_mutex);
  return std::exchange(records, {});
}

std::uint64_t ActivityRecorder::now_ns() const {
  std::uint64_t timestamp = 0;
  (void)cupti_api()->cuptiGetTimestamp(&timestamp);
  return timestamp;
}

}  // namespace kcoral::gpu
