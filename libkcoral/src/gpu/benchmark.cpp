// run_benchmark: estimate, warm up, then time each call by its CUPTI activity span.
#include "kcoral/benchmark.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cxxabi.h>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "activity_recorder.hpp"
#include "call_traces.hpp"
#include "cuda_api.hpp"
#include "kcoral/gpu_inventory.hpp"

namespace kcoral::gpu {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kMaxCalls = 100000;

// refuse_multi_stream_calls' setting, and whether a call was refused since the last take.
std::atomic<bool> refuse_multi_stream{false};
std::atomic<bool> multi_stream_refused{false};

// A device buffer the fence writes before each call: `bytes` of kFlushByte (the L2 flush:
// twice the L2, so that no call finds the previous one's data there) or one 4-byte mark
// (call_traces.hpp).
class FenceBuffer {
 public:
  static Result<FenceBuffer> make(const DriverApi& cuda, std::size_t bytes) {
    FenceBuffer buffer(cuda, bytes);
    KCORAL_CU_TRY(cuda.cuMemAlloc(&buffer.pointer_, bytes));
    return buffer;
  }
  // The L2 flush's size on the current context's device.
  static Result<std::size_t> flush_bytes(const DriverApi& cuda) {
    CUdevice device;
    KCORAL_CU_TRY(cuda.cuCtxGetDevice(&device));
    int l2_bytes = 0;
    KCORAL_CU_TRY(cuda.cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device));
    return 2 * static_cast<std::size_t>(l2_bytes);
  }
  FenceBuffer(FenceBuffer&& other) noexcept
      : cuda_(other.cuda_), bytes_(other.bytes_), pointer_(std::exchange(other.pointer_, 0)) {}
  FenceBuffer(const FenceBuffer&) = delete;
  ~FenceBuffer() {
    if (pointer_ != 0) (void)cuda_.cuMemFree(pointer_);
  }
  Status flush() const {
    KCORAL_CU_TRY(cuda_.cuMemsetD8Async(pointer_, kFlushByte, bytes_, nullptr));
    return {};
  }
  Status mark(std::size_t call) const {
    KCORAL_CU_TRY(cuda_.cuMemsetD32Async(pointer_, mark_value(call), 1, nullptr));
    return {};
  }

 private:
  FenceBuffer(const DriverApi& cuda, std::size_t bytes) : cuda_(cuda), bytes_(bytes) {}
  const DriverApi& cuda_;
  std::size_t bytes_;
  CUdeviceptr pointer_ = 0;
};

// The devices a measured function uses: the current context's, and every other visible
// device whose primary context is active once the function's first call has run (none,
// unless it drives several GPUs), each with its mark and, when flushing, its L2 flush. A
// fence flushes and marks each, then drains each.
class Devices {
 public:
  static Result<Devices> find(const DriverApi& cuda, bool flush_l2) {
    CUcontext home = nullptr;
    KCORAL_CU_TRY(cuda.cuCtxGetCurrent(&home));
    CUdevice home_device = -1;
    if (home != nullptr) KCORAL_CU_TRY(cuda.cuCtxGetDevice(&home_device));
    Devices devices(cuda, home);
    int count = 0;
    KCORAL_CU_TRY(cuda.cuDeviceGetCount(&count));
    for (int ordinal = 0; ordinal < count; ++ordinal) {
      CUdevice device = 0;
      KCORAL_CU_TRY(cuda.cuDeviceGet(&device, ordinal));
      unsigned flags = 0;
      int active = 0;
      KCORAL_CU_TRY(cuda.cuDevicePrimaryCtxGetState(device, &flags, &active));
      if (device == home_device || active == 0) continue;
      auto context = PrimaryContext::retain(cuda, ordinal);
      if (!context) return std::unexpected(context.error());
      devices.others_.push_back({std::move(*context), static_cast<std::uint32_t>(ordinal), std::nullopt, std::nullopt});
    }
    KCORAL_TRY(devices.make_buffers(static_cast<std::uint32_t>(home_device), flush_l2));
    return devices;
  }

  // Flushes every L2 (when flushing) and marks every device for call `call`, then drains
  // every device.
  Status fence(std::size_t call) const {
    KCORAL_TRY(fence_one(home_flusher_, *home_mark_, call));
    for (const Other& other : others_)
      KCORAL_TRY(in(other.context.get(), [&] { return fence_one(other.flusher, *other.mark, call); }));
    return drain();
  }

  Status drain() const {
    KCORAL_CU_TRY(cuda_.cuCtxSynchronize());
    for (const Other& other : others_)
      KCORAL_TRY(in(other.context.get(), [&]() -> Status {
        KCORAL_CU_TRY(cuda_.cuCtxSynchronize());
        return {};
      }));
    return {};
  }

  // Per device (CUDA ordinal, as CUPTI names it), the size of its L2 flush; empty when not
  // flushing.
  const std::map<std::uint32_t, std::uint64_t>& flush_bytes() const { return flush_bytes_; }

 private:
  struct Other {
    PrimaryContext context;
    std::uint32_t ordinal;
    std::optional<FenceBuffer> flusher;
    std::optional<FenceBuffer> mark;
  };
  Devices(const DriverApi& cuda, CUcontext home) : cuda_(cuda), home_(home) {}

  Status make_buffers(std::uint32_t home_ordinal, bool flush_l2) {
    auto make = [&](std::optional<FenceBuffer>& flusher, std::optional<FenceBuffer>& mark,
                    std::uint32_t ordinal) -> Status {
      auto word = FenceBuffer::make(cuda_, 4);
      if (!word) return std::unexpected(word.error());
      mark.emplace(std::move(*word));
      if (!flush_l2) return {};
      auto bytes = FenceBuffer::flush_bytes(cuda_);
      if (!bytes) return std::unexpected(bytes.error());
      auto made = FenceBuffer::make(cuda_, *bytes);
      if (!made) return std::unexpected(made.error());
      flusher.emplace(std::move(*made));
      flush_bytes_[ordinal] = *bytes;
      return {};
    };
    KCORAL_TRY(make(home_flusher_, home_mark_, home_ordinal));
    for (Other& other : others_)
      KCORAL_TRY(in(other.context.get(), [&] { return make(other.flusher, other.mark, other.ordinal); }));
    return fence(0);  // the first touch of each buffer
  }

  static Status fence_one(const std::optional<FenceBuffer>& flusher, const FenceBuffer& mark, std::size_t call) {
    if (flusher) KCORAL_TRY(flusher->flush());
    return mark.mark(call);
  }

  // `step` with `context` current, the function's own context current again after it.
  template <class Step>
  Status in(CUcontext context, Step step) const {
    KCORAL_CU_TRY(cuda_.cuCtxSetCurrent(context));
    Status status = step();
    KCORAL_CU_TRY(cuda_.cuCtxSetCurrent(home_));
    return status;
  }

  const DriverApi& cuda_;
  CUcontext home_;
  std::optional<FenceBuffer> home_flusher_;
  std::optional<FenceBuffer> home_mark_;
  std::vector<Other> others_;
  std::map<std::uint32_t, std::uint64_t> flush_bytes_;
};

double percentile(std::vector<double> sorted, double fraction) {
  if (sorted.empty()) return 0;
  double position = fraction * static_cast<double>(sorted.size() - 1);
  auto low = static_cast<std::size_t>(std::floor(position));
  std::size_t high = std::min(low + 1, sorted.size() - 1);
  return sorted[low] + (sorted[high] - sorted[low]) * (position - static_cast<double>(low));
}

// NVML's name for the device of the current context: "GPU-xxxxxxxx-xxxx-…".
std::string current_device_uuid(const DriverApi& cuda) {
  CUdevice device;
  CUuuid uuid;
  if (cuda.cuCtxGetDevice(&device) != CUDA_SUCCESS || cuda.cuDeviceGetUuid(&uuid, device) != CUDA_SUCCESS)
    return {};
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[64];
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                b[15]);
  return text;
}

// A kernel's name as its source wrote it (CUPTI gives C++ kernels' mangled names).
std::string demangled(const std::string& name) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> text(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status),
                                                   &std::free);
  return status == 0 && text ? std::string(text.get()) : name;
}

std::int64_t count_for(double budget_ms, double per_call_ms) {
  if (per_call_ms <= 0) return kMaxCalls;
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::llround(budget_ms / per_call_ms)), 1, kMaxCalls);
}

}  // namespace

Result<BenchmarkReport> run_benchmark(const BenchmarkCall& call, const BenchmarkConfig& config) {
  const DriverApi* cuda = driver_api();
  if (cuda == nullptr) return fail(ErrorKind::unavailable, "benchmark needs a GPU: " + load_error());
  auto recorder = ActivityRecorder::get();
  if (!recorder) return std::unexpected(recorder.error());

  // The first call may compile, load modules or allocate: it makes the context current,
  // and the contexts of whatever other devices the function drives.
  KCORAL_TRY(call());
  KCORAL_CU_TRY(cuda->cuCtxSynchronize());
  auto devices = Devices::find(*cuda, config.flush_l2);
  if (!devices) return std::unexpected(devices.error());
  // Warm-up and estimate: their marks are not recorded, so every fence marks as call 0.
  auto fence = [&] { return devices->fence(0); };

  // One iteration as the timed loop runs it: flush, call, drain. The budgets bound the
  // iterations' wall time, flushes and drains included, not the calls' alone: for a
  // microsecond kernel the flush and the drains cost more than the call.
  auto timed_iteration = [&]() -> Result<double> {
    Clock::time_point started = Clock::now();
    KCORAL_TRY(fence());
    KCORAL_TRY(call());
    KCORAL_TRY(devices->drain());
    return std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  };
  auto since = [](Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };

  BenchmarkReport report;
  report.flush_l2 = config.flush_l2;
  // Warm-up: the given count, or iterations until its budget is spent (at least one).
  // Their times are the estimate the timed calls' count comes from, so no call is made
  // only to estimate.
  std::vector<double> iteration_ms;
  Clock::time_point warmup_start = Clock::now();
  for (std::int64_t i = 0;; ++i) {
    bool done = config.warmup ? i >= *config.warmup : i >= 1 && since(warmup_start) >= config.warmup_ms;
    if (done) break;
    auto ms = timed_iteration();
    if (!ms) return std::unexpected(ms.error());
    iteration_ms.push_back(*ms);
  }
  report.warmup = static_cast<std::int64_t>(iteration_ms.size());
  if (iteration_ms.empty() && !config.repeat) {  // `warmup: 0` and a budget: one estimate
    auto ms = timed_iteration();
    if (!ms) return std::unexpected(ms.error());
    iteration_ms.push_back(*ms);
  }
  if (config.repeat) {
    report.repeat = std::max<std::int64_t>(*config.repeat, 1);
  } else {
    std::sort(iteration_ms.begin(), iteration_ms.end());
    report.repeat = count_for(config.repeat_ms, iteration_ms[iteration_ms.size() / 2]);
  }
  KCORAL_TRY(devices->drain());

  auto recording = (*recorder)->record();
  if (!recording) return std::unexpected(recording.error());
  std::string uuid = current_device_uuid(*cuda);
  std::vector<unsigned> clocks;
  // Each call is fenced (flushed, marked and drained: call_traces.hpp) and its window on
  // CUPTI's clock noted, for when a mark goes missing; the records are read once, after
  // the loop: flushing CUPTI's buffers between calls makes the next launches slower and
  // would stretch the span of multi-kernel calls.
  Status loop = {};
  std::vector<std::pair<std::uint64_t, std::uint64_t>> windows;
  windows.reserve(static_cast<std::size_t>(report.repeat));
  // A budget also ends the loop once spent: the count came from an estimate.
  Clock::time_point repeat_start = Clock::now();
  for (std::int64_t i = 0; i < report.repeat && loop; ++i) {
    if (!config.repeat && i >= 1 && since(repeat_start) >= config.repeat_ms) {
      report.repeat = i;
      break;
    }
    if (loop = devices->fence(static_cast<std::size_t>(i)); !loop) break;
    std::uint64_t called_at = (*recorder)->now_ns();
    if (loop = call(); !loop) break;
    if (loop = devices->drain(); !loop) break;
    windows.emplace_back(called_at, (*recorder)->now_ns());
    if (!uuid.empty() && (i % 16 == 0 || i + 1 == report.repeat))
      if (auto mhz = sm_clock_mhz(uuid)) clocks.push_back(*mhz);
  }
  std::vector<GpuActivity> activities = (*recorder)->collect();
  if (!loop) return std::unexpected(loop.error());
  auto marked = traces_by_mark(activities, windows.size(), devices->flush_bytes());
  std::vector<CallTrace> traces = marked ? std::move(*marked) : traces_by_window(activities, windows);
  if (!marked) report.calls_told_apart_by = "windows";
  if (refuse_multi_stream.load()) {
    std::size_t most = 0;
    for (const CallTrace& trace : traces) most = std::max(most, trace.most_streams);
    if (most > 1) {
      multi_stream_refused = true;
      return fail(ErrorKind::runtime,
                  "benchmark: a call ran work on " + std::to_string(most) + " streams of one GPU, and this "
                  "worker's CUDA context has one hardware queue, which would run them one after the other; "
                  "the server runs this program again on a worker with CUDA's default queues");
    }
  }

  std::vector<double> spans;
  for (const CallTrace& trace : traces)
    if (!trace.activities.empty()) spans.push_back(trace.span_ms);
  if (spans.empty())
    return fail(ErrorKind::runtime,
                "benchmark: the function launched no GPU activity (no kernel, copy or memset) in " +
                    std::to_string(traces.size()) + " calls; nothing to time. Is it asynchronous "
                    "work on another device, or host-only code?");
  std::sort(spans.begin(), spans.end());
  report.latency_ms_median = percentile(spans, 0.5);
  report.latency_ms_mean = std::accumulate(spans.begin(), spans.end(), 0.0) / static_cast<double>(spans.size());
  report.latency_ms_min = spans.front();
  report.latency_ms_max = spans.back();
  report.latency_ms_p10 = percentile(spans, 0.1);
  report.latency_ms_p90 = percentile(spans, 0.9);
  // Per device, when the calls ran on more than one: each device's span in the calls that
  // used it.
  std::map<std::uint32_t, std::vector<double>> device_spans;
  for (const CallTrace& trace : traces)
    for (const auto& [device, span] : trace.device_span_ms) device_spans[device].push_back(span);
  if (device_spans.size() > 1)
    for (auto& [device, of_device] : device_spans) {
      std::sort(of_device.begin(), of_device.end());
      report.per_device.push_back({static_cast<int>(device), percentile(of_device, 0.5), of_device.front(),
                                   of_device.back(), static_cast<std::int64_t>(of_device.size())});
    }
  // The activities most calls launched: a stray first or last call does not define them.
  std::map<std::vector<std::string>, std::int64_t> patterns;
  for (const CallTrace& trace : traces) ++patterns[trace.activities];
  auto common = std::max_element(patterns.begin(), patterns.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
  for (const std::string& name : common->first) report.activities.push_back(demangled(name));
  report.activities_per_call = static_cast<std::int64_t>(report.activities.size());
  report.calls_with_other_activities = static_cast<std::int64_t>(traces.size()) - common->second;
  report.activities_stable = report.calls_with_other_activities == 0;
  if (!clocks.empty()) {
    report.sm_clock_mhz_min = *std::min_element(clocks.begin(), clocks.end());
    report.sm_clock_mhz_max = *std::max_element(clocks.begin(), clocks.end());
  }
  return report;
}

void prepare_benchmark() {
  const DriverApi* cuda = driver_api();
  if (cuda == nullptr) return;
  // CUPTI sets itself up on its first recording: here, before any program's timing. The
  // thread for its buffers it starts with the first buffer it fills, in the first
  // program's benchmark(), and a reused worker's check leaves it out (benchmark_threads()).
  // Filling a buffer here (a recorded memset) would start it before the check's baseline,
  // but it is GPU work outside any program's lease, so it is not done.
  if (auto recorder = ActivityRecorder::get(); recorder) (void)(*recorder)->record();
  if (std::string uuid = current_device_uuid(*cuda); !uuid.empty()) (void)sm_clock_mhz(uuid);
}

std::vector<int> benchmark_threads() { return ActivityRecorder::started_threads(); }

void refuse_multi_stream_calls(bool refuse) { refuse_multi_stream = refuse; }

bool take_multi_stream_refusal() { return multi_stream_refused.exchange(false); }

}  // namespace kcoral::gpu
