// A worker's frames as the front reads them. A worker runs strangers' code, so each frame
// is checked for what it may be before and as it is read: a large frame's object is peeked
// at (where it ends, the output it says follows) so that its answer can be held in the
// in-flight budget before a byte of it is read; then the frame is read, held to that (its
// size as it came, its object no longer), decoded, and a message other than a result held
// to a few kilobytes. A result becomes its program's result only with parts and an error
// that its job allows (WorkerHandle, which keeps the protocol's state, calls these).
//
//   auto object = peek_object(frame);                        // before reading: what to hold
//   auto message = read_message(frame, max_bytes, object ? object->end : frame.text_bytes());
//   auto result = decode_result(std::move(run_result), std::move(fds), job, interfered);
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "channel.hpp"
#include "execute_job.hpp"
#include "messages.hpp"
#include "returned_values.hpp"

namespace kcoral {

// How far into a large frame its object's end (the first newline) is looked for before it
// is read: a result's object holds its fields, an error's texts (72 KiB, as JSON up to six
// times that) and its part tables, which pass this only for tens of thousands of parts.
inline constexpr std::size_t kObjectPeekBytes = std::size_t{256} << 10;

// A frame of this many bytes or more can only be a running program's result (every other
// message is at most 64 KiB): its answer is held in the in-flight budget from its arrival.
// A smaller one is counted once its answer is written; until then it costs the front at
// most a few times this, a worker at a time.
inline constexpr std::size_t kHeldAnswerBytes = std::size_t{128} << 10;

// A large frame's object, as far as its first kObjectPeekBytes tell before it is read:
// where it ends, and the size of the output it says follows the values.
struct PeekedObject {
  std::size_t end;
  std::uint64_t output;
};
// nullopt: its object does not end within kObjectPeekBytes, or does not say its output's
// sizes, or says more than the frame holds.
[[nodiscard]] std::optional<PeekedObject> peek_object(const Frame& frame);

// What the JSON of a result's output takes beyond its bytes: six bytes for a control
// character (\u001b), two for a quote or a backslash. Output that is not UTF-8 is refused
// where the frame is read (read_message), so nothing else grows it.
[[nodiscard]] std::uint64_t output_json_excess(const messages::RunResult& result);

// A frame's message: its text read from its memory file where it was left there (checked
// again against `max_bytes`; and, as its answer's hold counted on, of the size it came
// with, its object no longer than `max_object`), then decoded; a result's values take the
// text's buffer rather than a copy of it. A message other than a result longer than 4 KiB
// (a failure's, 64 KiB), and a result whose output is not UTF-8, are refused.
[[nodiscard]] Result<messages::Message> read_message(
    Frame& frame, std::size_t max_bytes, std::size_t max_object = std::numeric_limits<std::size_t>::max());

// A result as its program's result: its parts (one memfd of the declared sizes within the
// job's binary limit, or the job's own blobs it names), its error (of a kind a worker may
// report, within the program, its texts cut as the executor cuts them; a gpu_access names
// `interfered_request_id`). An engine error for anything else.
[[nodiscard]] Result<ProgramResult> decode_result(messages::RunResult message, std::vector<UniqueFd> fds,
                                                  const ExecuteJob& job,
                                                  const std::optional<std::string>& interfered_request_id);

// The program failed at the return whose values were nested too deep (the last
// instruction when the worker named no return of `program`), every returned value dropped.
[[nodiscard]] ProgramResult too_deep(const ReturnedValuesRefusal& refusal, messages::RunResult message,
                                     const Program& program);

}  // namespace kcoral
