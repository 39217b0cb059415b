// ExecuteJob: one accepted POST /execute on its way through the worker pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "inflight_bytes.hpp"
#include "kcoral/blob.hpp"
#include "kcoral/blob_store.hpp"
#include "kcoral/codec.hpp"
#include "kcoral/execute.hpp"
#include "kcoral/program.hpp"
#include "kcoral/program_result.hpp"

namespace kcoral {

// How a job ended: a program result (COMPLETED or FAILED), or a request error (busy,
// timeout, engine) — with the times the front measured either way.
struct JobOutcome {
  Result<ProgramResult> result;
  ResponseTimings timings;
  // Why the worker, reusable, takes no more programs (its reuse check found its state
  // changed: "threads: ..."); the worker wrote it, so it is only ever counted by its kind.
  std::string worker_retired = {};
  // The GPUs the program's worker held, by --gpus index; empty on a CPU server.
  std::vector<int> gpu_ids = {};
  // The worker says the program's benchmark() refused a call that ran on several streams,
  // its CUDA contexts having one hardware queue (kcoral/benchmark.hpp): the pool runs the
  // program again on a worker of CUDA's default queues, once.
  bool multi_stream = false;
};

// From this many bytes, a step whose time grows with what a client or a worker sent runs on
// the front's long-step threads, never on the I/O threads or the pool's strand: admitting a
// body of that size, loading or copying that many bytes of blobs for a program, encoding an
// answer whose text is that long (router.hpp), reading and decoding a worker's frame that
// long (worker_handle.hpp).
inline constexpr std::uint64_t kLongStepBytes = std::uint64_t{1} << 20;
// So does an admission that reads this many blobs back from the disk cache, whatever their
// size: each is opened, mapped, hashed and given a memfd of its own (8,000 of them held an
// I/O thread for a good part of a second).
inline constexpr std::size_t kLongStepBlobs = 16;

// A job that this many workers died taking fails rather than being handed to another.
inline constexpr unsigned kMaxFailedHandOvers = 3;

// Seconds (a flag's value) as a timer's duration.
inline std::chrono::steady_clock::duration seconds_duration(double seconds) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

// "300 s": a duration in the messages of queue and run timeouts.
inline std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << seconds << " s";
  return out.str();
}

struct ExecuteJob {
  using Clock = std::chrono::steady_clock;

  std::string request_id;
  std::size_t tenant = 0;  // whose program it is: an index into the server's Tenants
  std::string client;      // the peer's address, for the event log
  std::uint64_t request_bytes = 0;
  // The program, its blobs (pinned in the cache while the job lives) and its limits, as
  // admit_execute accepted them.
  AdmittedRequest admitted;
  // The program's text as it came, in a sealed memfd of its own, which each worker that
  // runs the job parses again (no escaping into a message): made by seal_program_text at
  // admission, where a request's time may grow with its size, not at its dispatch on the
  // pool's strand, which every program shares (a program's text may be 64 MiB).
  UniqueFd program_text;
  // Makes program_text of admitted.program_json, and lets the string go.
  [[nodiscard]] Status seal_program_text() {
    auto text = Blob::sealed_copy(std::as_bytes(std::span(admitted.program_json)));
    if (!text) return std::unexpected(text.error());
    program_text = std::move(*text);
    std::string().swap(admitted.program_json);
    return {};
  }
  Clock::time_point received = Clock::now();
  // It ran once on a one-queue worker, and runs (or ran) again on one of CUDA's default
  // queues, because a benchmark() call of it ran on several streams (JobOutcome::multi_stream).
  bool ran_again = false;
  // Workers that died as it was handed to them (WorkerPool::hand_over).
  unsigned failed_hand_overs = 0;
  // Its answer arrived and the in-flight budget could not hold it (WorkerHandle::hold_more).
  bool answer_refused = false;
  // Its answer's bytes in the server's in-flight budget (and its tenant's), from the arrival
  // of the worker's frame that carries them (before a byte of it is read) until the HTTP
  // session writes the answer and holds it itself. None: not counted (a test's job).
  std::optional<InflightBytes::Reservation> answer_held;
  // Called exactly once, on the pool's strand, with the job itself; it must hand the
  // response's encoding to another executor (the HTTP session's).
  std::function<void(std::shared_ptr<ExecuteJob>, JobOutcome)> done;
};

}  // namespace kcoral
