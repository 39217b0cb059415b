// CallTraces: the GPU activity of each of a benchmark's timed calls, told apart on each
// device's own timeline by the marks its fences leave.
//
// Before each timed call, the fence writes a mark on every device it drains: a 4-byte
// memset of `mark_value(call)` (after the L2 flush, when flushing). A call's activities on
// a device are those that start after that device's mark for it ends and before its next
// mark starts (the last call's: all after its mark). Nothing here compares CUPTI's
// records with a CPU-side clock: both ends of a call are GPU activity, timed by the same
// device clock as the call's own kernels, so an offset between CUPTI's record timestamps
// and cuptiGetTimestamp() moves no activity into or out of a call.
//
//   auto traces = kcoral::gpu::traces_by_mark(collected, calls, flush_bytes_by_device);
//   if (!traces) ...  // a mark is missing: attribute by time windows instead
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "activity_recorder.hpp"

namespace kcoral::gpu {

struct CallTrace {
  double span_ms = 0;
  std::vector<std::string> activities;  // kinds and names, in start order
  std::map<std::uint32_t, double> device_span_ms;  // each device's first activity to its last
  std::size_t most_streams = 0;  // on any one device
};

// The value of the mark before call `call` (a 4-byte memset, cuMemsetD32).
[[nodiscard]] std::uint32_t mark_value(std::size_t call);
// The byte an L2 flush writes (cuMemsetD8): with the flush's size, what tells the fence's
// flush from a call's own memsets.
inline constexpr unsigned char kFlushByte = 0xA5;

// One trace per call, from the activities recorded while `calls` calls ran, each fenced
// with its marks. `flush_bytes`: per device, the size of its L2 flush (none when not
// flushing); flushes and marks are the fence's, in no trace. nullopt when the marks on
// some device that has activity are not exactly the calls' marks, each once and in order
// (CUPTI dropped a record, or a device was used that the fence does not mark). The
// activities may come in any order. No calls (a loop that failed at its first): no traces.
[[nodiscard]] std::optional<std::vector<CallTrace>> traces_by_mark(
    const std::vector<GpuActivity>& activities, std::size_t calls,
    const std::map<std::uint32_t, std::uint64_t>& flush_bytes);

// One trace per window [from, to] of CUPTI's clock (cuptiGetTimestamp() before a call and
// after its device drained): the activities that start in it. Right only while CUPTI's
// records and that clock agree to within a call's margins, which they do not in every
// process (benchmarks/gpu/results/2026-12-05-h100-timing-windows.md): for when the marks
// cannot be used.
[[nodiscard]] std::vector<CallTrace> traces_by_window(
    const std::vector<GpuActivity>& activities, const std::vector<std::pair<std::uint64_t, std::uint64_t>>& windows);

// One call's trace, made of its activities as they are added: each device's window (first
// start, last end) and streams, which finish() turns into spans.
class TraceBuilder {
 public:
  void add(const GpuActivity& activity);
  [[nodiscard]] CallTrace finish() &&;

 private:
  CallTrace trace_;
  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> device_window_;  // first start, last end
  std::map<std::uint32_t, std::set<std::uint32_t>> device_streams_;
};

}  // namespace kcoral::gpu
