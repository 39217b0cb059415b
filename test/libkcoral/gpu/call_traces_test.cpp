// traces_by_mark and traces_by_window (libkcoral/src/gpu/call_traces.cpp), on activities
// made up here as CUPTI would record them: each call fenced by an L2 flush and a 4-byte
// mark. Checked: every call gets its own kernels, and neither the flush nor the mark,
// whatever the offset of the records' clock; strays before the first mark are no call's;
// a flush recorded with its byte repeated is still the fence's, a call's memset of the
// flush's size its own; a call's own mark-like memset stays in its trace (one of a mark's
// value: nullopt); several devices, each split by its own marks; a lost mark, or activity
// on a device without marks, gives nullopt (the caller then uses windows); no calls, no
// traces; 100,000 calls shuffled; and the fault of windows that the marks avoid.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gpu/call_traces.hpp"

namespace {

using kcoral::gpu::GpuActivity;

constexpr std::uint64_t kFlushBytes = 100u << 20;

GpuActivity kernel(std::uint64_t start, std::uint64_t end, std::uint32_t device = 0, std::uint32_t stream = 7) {
  return {GpuActivity::Kind::kernel, start, end, "k", device, stream};
}
GpuActivity flush(std::uint64_t start, std::uint32_t device = 0) {
  return {GpuActivity::Kind::memset, start, start + 30'000, "memset", device, 1, kFlushBytes, kcoral::gpu::kFlushByte};
}
GpuActivity mark(std::uint64_t start, std::size_t call, std::uint32_t device = 0) {
  return {GpuActivity::Kind::memset, start, start + 2'000, "memset", device, 1, 4, kcoral::gpu::mark_value(call)};
}

// `calls` fenced calls of one 10 us kernel each on `device`, from `at` (ns), every 100 us.
std::vector<GpuActivity> fenced_calls(std::size_t calls, std::uint64_t at = 1'000'000, std::uint32_t device = 0) {
  std::vector<GpuActivity> out;
  for (std::size_t i = 0; i < calls; ++i) {
    std::uint64_t t = at + i * 100'000;
    out.push_back(flush(t, device));
    out.push_back(mark(t + 31'000, i, device));
    out.push_back(kernel(t + 40'000, t + 50'000, device));
  }
  return out;
}

const std::map<std::uint32_t, std::uint64_t> kFlushing{{0, kFlushBytes}, {1, kFlushBytes}};

}  // namespace

TEST_SUITE("call_traces") {

TEST_CASE("each call gets its own kernel, not the fence's flush or mark, and strays before the first mark none") {
  auto activities = fenced_calls(3);
  activities.push_back(kernel(10, 20));  // before the first mark: a warm-up's, no call's
  auto traces = kcoral::gpu::traces_by_mark(activities, 3, kFlushing);
  REQUIRE(traces);
  REQUIRE(traces->size() == 3);
  for (const auto& trace : *traces) {
    CHECK(trace.activities == std::vector<std::string>{"k"});
    CHECK(trace.span_ms == doctest::Approx(0.010));
    CHECK(trace.most_streams == 1);
  }
}

TEST_CASE("the marks split calls whatever the records' offset from CUPTI's clock; windows do not") {
  // Windows as benchmark() takes them on CUPTI's clock: from after the fence to after the
  // drain. The records come 35 us later on that clock than they ran.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> windows;
  for (std::size_t i = 0; i < 3; ++i) windows.emplace_back(1'000'000 + i * 100'000 + 34'000, 1'000'000 + i * 100'000 + 60'000);
  auto activities = fenced_calls(3);
  for (GpuActivity& activity : activities) {
    activity.start_ns += 35'000;
    activity.end_ns += 35'000;
  }
  auto marked = kcoral::gpu::traces_by_mark(activities, 3, kFlushing);
  REQUIRE(marked);
  for (const auto& trace : *marked) CHECK(trace.activities == std::vector<std::string>{"k"});
  // The windows take in the mark and lose the kernel of every call: the fault the marks fix.
  auto windowed = kcoral::gpu::traces_by_window(activities, windows);
  REQUIRE(windowed.size() == 3);
  CHECK(windowed[0].activities == std::vector<std::string>{"memset"});
}

TEST_CASE("without flushing, the marks alone fence the calls") {
  std::vector<GpuActivity> activities;
  for (std::size_t i = 0; i < 4; ++i) {
    activities.push_back(mark(i * 50'000, i));
    activities.push_back(kernel(i * 50'000 + 5'000, i * 50'000 + 9'000));
    activities.push_back(kernel(i * 50'000 + 9'500, i * 50'000 + 12'000, 0, 8));
  }
  auto traces = kcoral::gpu::traces_by_mark(activities, 4, {});
  REQUIRE(traces);
  for (const auto& trace : *traces) {
    CHECK(trace.activities.size() == 2);
    CHECK(trace.span_ms == doctest::Approx(0.007));
    CHECK(trace.most_streams == 2);
  }
}

TEST_CASE("a flush recorded with its byte repeated across the word is the fence's; a call's memset of its size is not") {
  auto activities = fenced_calls(2);
  for (GpuActivity& activity : activities)
    if (activity.bytes == kFlushBytes) activity.value = 0xA5A5A5A5u;
  GpuActivity own = flush(1'042'000);
  own.value = 0;  // the call's own memset of the flush's size, another byte
  activities.push_back(own);
  auto traces = kcoral::gpu::traces_by_mark(activities, 2, kFlushing);
  REQUIRE(traces);
  CHECK((*traces)[0].activities == std::vector<std::string>{"k", "memset"});
  CHECK((*traces)[1].activities == std::vector<std::string>{"k"});
}

TEST_CASE("a call's own mark-like memset stays in its trace; one of a mark's value leaves the marks in doubt") {
  auto activities = fenced_calls(2);
  activities.push_back(mark(1'045'000, 1));  // inside call 0, with the value call 1's mark has
  auto traces = kcoral::gpu::traces_by_mark(activities, 2, kFlushing);
  // Three records that could be the two calls' marks: which is the fence's is in doubt, so
  // nullopt, and windows decide.
  CHECK_FALSE(traces);
  activities.back() = mark(1'045'000, 7);  // a value the fence has not reached
  traces = kcoral::gpu::traces_by_mark(activities, 2, kFlushing);
  REQUIRE(traces);
  CHECK((*traces)[0].activities == std::vector<std::string>{"k", "memset"});
}

TEST_CASE("several devices: each split by its own marks, with a span per device") {
  auto activities = fenced_calls(2, 1'000'000, 0);
  auto second = fenced_calls(2, 5'000'000, 1);  // another clock's offset: no matter
  activities.insert(activities.end(), second.begin(), second.end());
  auto traces = kcoral::gpu::traces_by_mark(activities, 2, kFlushing);
  REQUIRE(traces);
  for (const auto& trace : *traces) {
    CHECK(trace.activities.size() == 2);
    CHECK(trace.device_span_ms.size() == 2);
    CHECK(trace.device_span_ms.at(1) == doctest::Approx(0.010));
  }
}

TEST_CASE("a lost mark, or activity on a device the fence does not mark, gives nullopt") {
  auto activities = fenced_calls(3);
  activities.erase(activities.begin() + 4);  // call 1's mark
  CHECK_FALSE(kcoral::gpu::traces_by_mark(activities, 3, kFlushing));
  activities = fenced_calls(3);
  activities.push_back(kernel(1'140'000, 1'150'000, 2));
  CHECK_FALSE(kcoral::gpu::traces_by_mark(activities, 3, kFlushing));
}

TEST_CASE("no calls (the loop failed at its first): no traces, whatever was recorded") {
  // What the first fence and a failed call left: its mark and a kernel, but no call ended.
  auto activities = fenced_calls(1);
  auto traces = kcoral::gpu::traces_by_mark(activities, 0, kFlushing);
  REQUIRE(traces);
  CHECK(traces->empty());
  CHECK(kcoral::gpu::traces_by_window(activities, {}).empty());
}

TEST_CASE("100,000 calls, their records shuffled, each get their kernel") {
  constexpr std::size_t kCalls = 100'000;
  auto activities = fenced_calls(kCalls);
  std::mt19937 random(7);
  std::shuffle(activities.begin(), activities.end(), random);
  auto traces = kcoral::gpu::traces_by_mark(activities, kCalls, kFlushing);
  REQUIRE(traces);
  REQUIRE(traces->size() == kCalls);
  std::size_t right = 0;
  for (const auto& trace : *traces) right += trace.activities.size() == 1 && trace.span_ms > 0.0099 && trace.span_ms < 0.0101;
  CHECK(right == kCalls);
}

}  // TEST_SUITE
