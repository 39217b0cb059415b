// CallTraces: a benchmark's timed calls told apart by their fences' marks.
#include "call_traces.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace kcoral::gpu {
namespace {

// "KC" in the high half: a call's own 4-byte memset of such a value is not taken for a mark
// unless it also comes where the fence's next mark belongs.
constexpr std::uint32_t kMarkBase = 0x4B430000u;

// CUPTI's record of a cuMemsetD8 holds the byte it wrote, which some versions may give
// repeated across the word: either is the flush's.
bool is_flush(const GpuActivity& activity, std::uint64_t flush_bytes) {
  return activity.kind == GpuActivity::Kind::memset && activity.bytes == flush_bytes &&
         (activity.value == kFlushByte || activity.value == 0x01010101u * kFlushByte);
}

bool is_mark(const GpuActivity& activity) {
  return activity.kind == GpuActivity::Kind::memset && activity.bytes == 4 && (activity.value & 0xFFFF0000u) == kMarkBase;
}

// The records in start order, as pointers: sorting these moves no record (nor its name).
std::vector<const GpuActivity*> in_start_order(const std::vector<GpuActivity>& activities) {
  std::vector<const GpuActivity*> ordered;
  ordered.reserve(activities.size());
  for (const GpuActivity& activity : activities) ordered.push_back(&activity);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const GpuActivity* a, const GpuActivity* b) { return a->start_ns < b->start_ns; });
  return ordered;
}

}  // namespace

std::uint32_t mark_value(std::size_t call) { return kMarkBase | static_cast<std::uint32_t>(call & 0xFFFFu); }

void TraceBuilder::add(const GpuActivity& activity) {
  auto [window, first_here] = device_window_.try_emplace(activity.device, activity.start_ns, activity.end_ns);
  if (!first_here) window->second.second = std::max(window->second.second, activity.end_ns);
  trace_.activities.push_back(activity.name);
  device_streams_[activity.device].insert(activity.stream);
}

CallTrace TraceBuilder::finish() && {
  for (const auto& [device, streams] : device_streams_) trace_.most_streams = std::max(trace_.most_streams, streams.size());
  std::uint64_t first = std::numeric_limits<std::uint64_t>::max(), last = 0;
  for (const auto& [device, window] : device_window_) {
    trace_.device_span_ms[device] = static_cast<double>(window.second - window.first) / 1e6;
    first = std::min(first, window.first);
    last = std::max(last, window.second);
  }
  if (!trace_.activities.empty()) trace_.span_ms = static_cast<double>(last - first) / 1e6;
  return std::move(trace_);
}

std::optional<std::vector<CallTrace>> traces_by_mark(const std::vector<GpuActivity>& activities, std::size_t calls,
                                                     const std::map<std::uint32_t, std::uint64_t>& flush_bytes) {
  if (calls == 0) return std::vector<CallTrace>{};  // whatever was recorded is no call's
  // Per device, in start order: the marks, each call's in turn, and the rest; and how many
  // records could be a call's mark, which must be as many as the calls: one more (a
  // call's own memset of a mark's value) would leave which is the fence's in doubt.
  std::map<std::uint32_t, std::vector<const GpuActivity*>> marks, others;
  std::map<std::uint32_t, std::size_t> mark_like;
  for (const GpuActivity* activity : in_start_order(activities)) {
    auto flush = flush_bytes.find(activity->device);
    if (flush != flush_bytes.end() && is_flush(*activity, flush->second)) continue;
    std::vector<const GpuActivity*>& device_marks = marks[activity->device];
    if (is_mark(*activity) && (calls > 0xFFFFu || (activity->value & 0xFFFFu) < calls)) ++mark_like[activity->device];
    if (is_mark(*activity) && activity->value == mark_value(device_marks.size()) && device_marks.size() < calls)
      device_marks.push_back(activity);
    else
      others[activity->device].push_back(activity);
  }
  std::vector<TraceBuilder> builders(calls);
  for (const auto& [device, rest] : others) {
    const std::vector<const GpuActivity*>& device_marks = marks[device];
    if (device_marks.size() != calls || mark_like[device] != calls) return std::nullopt;
    std::size_t call = 0;
    for (const GpuActivity* activity : rest) {
      while (call + 1 < calls && activity->start_ns >= device_marks[call + 1]->start_ns) ++call;
      if (activity->start_ns < device_marks[call]->end_ns) continue;  // before this call's mark: not a call's
      builders[call].add(*activity);
    }
  }
  std::vector<CallTrace> traces;
  traces.reserve(calls);
  for (TraceBuilder& builder : builders) traces.push_back(std::move(builder).finish());
  return traces;
}

std::vector<CallTrace> traces_by_window(const std::vector<GpuActivity>& activities,
                                        const std::vector<std::pair<std::uint64_t, std::uint64_t>>& windows) {
  std::vector<const GpuActivity*> ordered = in_start_order(activities);
  std::vector<CallTrace> traces;
  traces.reserve(windows.size());
  auto next = ordered.begin();
  for (const auto& [from, to] : windows) {
    while (next != ordered.end() && (*next)->start_ns < from) ++next;  // fences, strays
    TraceBuilder builder;
    for (; next != ordered.end() && (*next)->start_ns <= to; ++next) builder.add(**next);
    traces.push_back(std::move(builder).finish());
  }
  return traces;
}

}  // namespace kcoral::gpu
