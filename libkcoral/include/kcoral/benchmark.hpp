// The GPU timing behind kcoral.builtins.benchmark.
//
// Each call is measured from its first GPU activity to its last (kernels, copies,
// memsets; gaps included, host work before and after excluded), from CUPTI activity
// records, on whichever devices it uses: a call that drives several GPUs spans from the
// first activity on any to the last on any, with each device's span beside it.
// Activities are attributed to a call by fencing it: every device it uses is drained
// before and after each call, and the activities that start inside that window on
// CUPTI's clock are the call's. No API tracing runs in the timed loop, and CUPTI's
// buffers are read only after it. The optional L2 flush (zeroing twice the L2) happens
// before each call, outside its span.
//
// Defined in builds with CUDA (KCORAL_HAVE_CUDA) only; CUDA and CUPTI are opened at run
// time, so such a build runs where no driver is installed and fails these calls there.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kcoral/error.hpp"

namespace kcoral::gpu {

// The budgets bound wall time, each call's flush and drains included (see benchmark()'s
// docstring in kcoral/builtins.py).
struct BenchmarkConfig {
  double warmup_ms = 25;
  double repeat_ms = 100;
  std::optional<std::int64_t> warmup;  // explicit counts override the budgets
  std::optional<std::int64_t> repeat;
  bool flush_l2 = true;
};

// One device's part of the calls, when they ran on several: from its first activity in a
// call to its last, over the calls that used it.
struct DeviceLatency {
  int device = 0;  // the CUDA device, as the program sees it (0..n-1)
  double latency_ms_median = 0;
  double latency_ms_min = 0;
  double latency_ms_max = 0;
  std::int64_t calls = 0;  // timed calls with activity on it
};

struct BenchmarkReport {
  double latency_ms_median = 0;
  double latency_ms_mean = 0;
  double latency_ms_min = 0;
  double latency_ms_max = 0;
  double latency_ms_p10 = 0;
  double latency_ms_p90 = 0;
  std::int64_t warmup = 0;
  std::int64_t repeat = 0;
  bool flush_l2 = true;
  // What the calls launched, by name (kernels by theirs, copies "memcpy", memsets "memset"),
  // in start order: the list most of the timed calls launched, and how many launched another.
  std::vector<std::string> activities;
  std::int64_t activities_per_call = 0;  // activities.size()
  std::int64_t calls_with_other_activities = 0;
  bool activities_stable = true;  // calls_with_other_activities == 0
  // How the calls' activities were told apart: "marks", each device's own timeline split by
  // the marks the fences wrote; or "windows" of CUPTI's clock, when a mark went missing,
  // which are right only while CUPTI's records and that clock agree.
  std::string calls_told_apart_by = "marks";
  std::optional<unsigned> sm_clock_mhz_min;  // sampled during the timed calls
  std::optional<unsigned> sm_clock_mhz_max;
  // By device, when the calls ran on more than one (the latencies above then span all of
  // them: from the first activity on any to the last on any); empty otherwise.
  std::vector<DeviceLatency> per_device;
};

// A call of the measured function. A failure is passed through unchanged: the caller
// keeps its own error (a Python exception, say) and benchmark() returns that Error.
using BenchmarkCall = std::function<Status()>;

[[nodiscard]] Result<BenchmarkReport> run_benchmark(const BenchmarkCall& call,
                                                    const BenchmarkConfig& config);

// What run_benchmark's first call would otherwise set up inside a program's lease: CUPTI
// (loaded, its activity buffers made by one enable and disable) and NVML (the clock
// samples). For a worker to call before it takes a program; a failure here is left for
// run_benchmark to report.
void prepare_benchmark();

// The thread CUPTI starts, for good, when run_benchmark first records GPU activity in this
// process (the one that takes its filled buffers), by id; empty until then. It is
// benchmark()'s, not the program's: a worker that checks its threads between programs
// leaves it out.
[[nodiscard]] std::vector<int> benchmark_threads();

// For a process whose CUDA contexts have one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1:
// a kcoral-server worker made fast to start), where work on two streams runs one after
// the other instead of side by side. With `refuse` on, run_benchmark refuses calls whose
// timed work ran on more than one stream of a device (a `runtime` error that says why) and
// notes it; the server then runs the whole program again on a worker with CUDA's default
// queues, so that a multi-stream call is timed as CUDA would run it.
void refuse_multi_stream_calls(bool refuse);
// Whether a run_benchmark refused such a call since the last take (and clears it).
[[nodiscard]] bool take_multi_stream_refusal();

}  // namespace kcoral::gpu
