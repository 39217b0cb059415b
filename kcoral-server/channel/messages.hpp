// The channel protocol: every message between the front, the zygote and the workers, one
// struct each, and the one table of their type names.
//
// A message travels as the JSON object {"type": <type name>, <its fields>} in one Channel
// frame, with exactly the descriptors it declares (`descriptor_count`); a result's values
// follow its object after a newline, as they are, then its stdout and its stderr, whose
// sizes the object gives as `stdout_bytes` and `stderr_bytes` (RunResult::results: JSON
// text of up to hundreds of megabytes, and output of tens, which a JSON string would
// escape and a JSON parser would copy twice more; a newline is always escaped inside the
// object's JSON). `decode` is
// strict: an unknown type, a missing field, a field of the wrong type, an unknown field or
// another number of descriptors is an error, never a default. Which message is valid when
// is the receiver's business (the front's WorkerHandle and ZygoteHandle keep a state
// machine each); this file knows the shapes only.
//
//   (void)send(channel, messages::Progress{3});
//   auto message = receive(channel);        // Result<std::optional<messages::Received>>
//   if (auto* progress = std::get_if<messages::Progress>(&(*message)->message)) ...
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <variant>
#include <vector>

#include "channel.hpp"

namespace kcoral::messages {

// front -> zygote: prepare one more worker, pinned to `visible_devices` (a GPU's UUID, or
// several joined by commas; empty on a CPU server), whose CUDA contexts have
// `cuda_connections` hardware queues (CUDA_DEVICE_MAX_CONNECTIONS; 0: CUDA's default).
// `refuse_multi_stream`: its benchmark() refuses calls that run on several streams, and
// its result says so (RunResult::multi_stream), for the front to run the program again
// on a worker of CUDA's queues. `warm_up`: it runs the warm-up program before it says it
// is ready, which spares its first program the first run's costs (not when programs
// already wait for a worker: there it would only delay the next one and add CPU).
struct Fork {
  std::string visible_devices;
  std::int64_t cuda_connections = 0;
  bool refuse_multi_stream = false;
  bool warm_up = true;
};
// zygote -> front, once: the interpreter is up; what its environment has installed; and
// the pids of its helpers, which fork the workers when it has any (worker/zygote.hpp).
struct ZygoteReady {
  std::map<std::string, std::string> versions;
  std::vector<std::int64_t> fork_parents;
};
// zygote -> front: a worker was forked. Descriptors: the front's end of its channel, and a
// pidfd of the worker (opened by its parent before it could be reaped, so it names that
// process and no other that may get its pid later).
struct Forked {
  std::int64_t pid = 0;
};
// zygote -> front: a worker ended (exit code or signal) and was reaped; `out_of_memory`
// (true, or absent) when its program's processes ran out of their memory limit together
// and were killed for it.
struct Exited {
  std::int64_t pid = 0;
  std::optional<std::int64_t> exit_code;
  std::optional<std::int64_t> signal;
  std::optional<bool> out_of_memory;
};
// zygote -> front: the zygote cannot go on (it exits after this).
struct ZygoteFailed {
  std::string message;
};
// zygote -> front: the oldest fork request not yet answered could not be met (no descriptor
// or memory for the worker's channel or process, say); the zygote goes on serving.
struct ForkFailed {
  std::string message;
};

// front -> worker: blobs of the next program. Descriptors: `file_count` sealed memfds;
// blob i is `sizes[i]` bytes at `offsets[i]` of memfd `files[i]` (many blobs may share one).
struct Blobs {
  std::vector<std::string> digests;
  std::vector<std::uint64_t> files;
  std::vector<std::uint64_t> offsets;
  std::vector<std::uint64_t> sizes;
  std::uint64_t file_count = 0;
};
// front -> worker: the program to run (its blobs came before).
// Its one descriptor: a sealed memfd holding the program's JSON as the client sent it,
// which the worker parses itself (its own check of what it runs).
struct RunProgram {
  std::string request_id;
  std::uint64_t output_limit_bytes = 0;
  std::uint64_t max_returned_bytes = 0;
};
// front -> worker: the lease (program or init) asked for is held for you now.
struct LeaseGranted {};

// worker -> front: prepared, or done with a program and taking another: send a job.
struct Ready {};
// worker -> front: instruction `index` starts now.
struct Progress {
  std::uint64_t index = 0;
};
// worker -> front: ask for (true) or give back (false) the GPU lease.
struct Lease {
  bool acquire = false;
};
// worker -> front: ask for or give back a turn to make a CUDA context.
struct InitLease {
  bool acquire = false;
};
// worker -> front: a cpu_only call used the GPU just now.
struct GpuAccess {};
// worker -> front: the worker could not prepare itself (it exits after this).
struct Failed {
  std::string message;
};
// The failed instruction of a RunResult.
struct ErrorDetail {
  ErrorKind kind = ErrorKind::runtime;  // on the channel, its protocol name (to_wire)
  std::string message;
  std::uint64_t index = 0;
  std::string op;
  std::string traceback;
  std::optional<std::string> id;
  std::optional<std::string> cuda_call;
  std::optional<std::string> location;
};
// The most binary parts one result carries (the worker's encoder refuses more, as a
// `serialization` error of the return that would pass it).
inline constexpr std::size_t kMaxResultParts = std::size_t{1} << 20;
// worker -> front: the program's result. Part i is `part_sizes[i]` bytes: the program's
// blob `part_blobs[i]` (a bytes upload returned as it came, named by its digest) where that
// is given and not empty, else the next in the memfd. Descriptor, when any part is in the
// memfd: one sealed memfd holding those parts back to back, in order, and nothing else.
struct RunResult {
  bool continues = false;  // the worker takes another program afterwards
  std::string results;     // the JSON object of returned values (docs/protocol.md)
  std::string stdout_text;
  bool stdout_truncated = false;
  std::string stderr_text;
  bool stderr_truncated = false;
  double elapsed_ms = 0;
  std::vector<std::uint64_t> part_sizes;
  std::optional<ErrorDetail> error;
  std::string retired = {};  // why the worker takes no other program, before its count ran out
  // Its benchmark() refused a call that ran on several streams (Fork::refuse_multi_stream).
  bool multi_stream = false;
  std::vector<std::string> part_blobs = {};  // empty, or one digest (or "") per part
};
// Whether part `i` of `result` is one of the program's blobs (part_blobs) rather than in its memfd.
[[nodiscard]] inline bool names_blob(const RunResult& result, std::size_t i) {
  return i < result.part_blobs.size() && !result.part_blobs[i].empty();
}

using Message = std::variant<Fork, ZygoteReady, Forked, Exited, ZygoteFailed, ForkFailed, Blobs, RunProgram, LeaseGranted, Ready,
                             Progress, Lease, InitLease, GpuAccess, Failed, RunResult>;

// The type names, in the order of Message's alternatives.
inline constexpr std::array<std::string_view, std::variant_size_v<Message>> kNames{
    "fork",  "zygote_ready", "forked",     "exited", "zygote_failed", "fork_failed", "blobs",  "run",   "lease_granted",
    "ready", "progress",     "lease",      "init_lease", "gpu_access", "failed", "result"};

[[nodiscard]] std::string_view name_of(const Message& message);
// How many descriptors travel with the message.
[[nodiscard]] std::size_t descriptor_count(const Message& message);

// The frame text of a message.
[[nodiscard]] std::string encode(const Message& message);
// Parses a frame text carrying `descriptors` descriptors, strictly (see above), in time
// linear in the text and memory bounded by it: nesting past a message's own and more than
// a few million values are refused as they are read.
[[nodiscard]] kcoral::Result<Message> decode(std::string_view text, std::size_t descriptors);
// The same, with a result's values moved out of `text` rather than copied (the frame's
// buffer becomes them): what the front and `receive` use; `decode` copies the text first.
[[nodiscard]] kcoral::Result<Message> decode_in_place(std::string&& text, std::size_t descriptors);

// Sends a message with its descriptors (their count must be the message's).
[[nodiscard]] Status send(const Channel& channel, const Message& message, std::span<const int> fds = {});

struct Received {
  Message message;
  std::vector<UniqueFd> fds;
};
// Receives and decodes one message: nullopt when there is nothing to read; an error for a
// closed channel (channel.peer_closed() then) or a frame that is not a valid message.
[[nodiscard]] kcoral::Result<std::optional<Received>> receive(const Channel& channel);

}  // namespace kcoral::messages
