// A worker's frames as the front reads them (worker_frames.hpp).
#include "worker_frames.hpp"

#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <string_view>

namespace kcoral {
namespace {

// The longest text a worker's message may have. Only a result carries data; the messages a
// program's run repeats (progress, lease, gpu_access: three an instruction) are a few dozen
// bytes, and are bounded so that padding them (a worker's memory is the program's to patch)
// cannot make the front parse megabytes per instruction on the strand every worker shares.
std::size_t longest_text(const messages::Message& message) {
  if (std::holds_alternative<messages::RunResult>(message)) return std::numeric_limits<std::size_t>::max();
  if (std::holds_alternative<messages::Failed>(message)) return std::size_t{64} << 10;  // once, at a start
  return std::size_t{4} << 10;
}

// The number after `"<key>":` in a frame's object (a quote in a JSON string is escaped, so
// the key with its quotes and colon is found only as a key); nullopt if none.
std::optional<std::uint64_t> number_after(std::string_view object, std::string_view key) {
  std::size_t at = object.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  std::uint64_t value = 0;
  const char* first = object.data() + at + key.size();
  auto [end, error] = std::from_chars(first, object.data() + object.size(), value);
  if (error != std::errc() || end == first) return std::nullopt;
  return value;
}

// The error kinds a worker may report for a program: those of a failed instruction, and
// a response that would not fit.
bool worker_may_report(ErrorKind kind) { return is_program_kind(kind) || kind == ErrorKind::response_too_large; }

// A worker's output is always UTF-8: it decodes what its program printed, replacing what is
// not. Any other would grow as it is written (each such byte replaced by three), beyond
// what its answer's hold counts.
bool output_is_utf8(const messages::RunResult& result) {
  return simdjson::validate_utf8(result.stdout_text.data(), result.stdout_text.size()) &&
         simdjson::validate_utf8(result.stderr_text.data(), result.stderr_text.size());
}

}  // namespace

std::optional<PeekedObject> peek_object(const Frame& frame) {
  std::string head(std::min(frame.text_bytes(), kObjectPeekBytes), '\0');
  ssize_t n = frame.spilled ? ::pread(frame.spilled.get(), head.data(), head.size(), 0) : -1;
  if (n <= 0) return std::nullopt;
  std::string_view object(head.data(), static_cast<std::size_t>(n));
  std::size_t end = object.find('\n');
  if (end == std::string_view::npos) return std::nullopt;
  object = object.substr(0, end);
  auto out = number_after(object, R"("stdout_bytes":)");
  auto err = number_after(object, R"("stderr_bytes":)");
  if (!out || !err || *out > frame.text_bytes() || *err > frame.text_bytes() - *out) return std::nullopt;
  return PeekedObject{end, *out + *err};
}

std::uint64_t output_json_excess(const messages::RunResult& result) {
  std::uint64_t excess = 0;
  for (const std::string* text : {&result.stdout_text, &result.stderr_text})
    for (unsigned char c : *text) excess += c < 0x20 ? 5 : (c == '"' || c == '\\') ? 1 : 0;
  return excess;
}

Result<messages::Message> read_message(Frame& frame, std::size_t max_bytes, std::size_t max_object) {
  const std::size_t arrived = frame.text_bytes();
  if (auto read = Channel::read_spilled(frame, max_bytes); !read) return std::unexpected(read.error());
  if (frame.json.size() != arrived) return fail(ErrorKind::engine, "a frame whose text changed size after it came");
  if (max_object < frame.json.size() && frame.json.find('\n') > max_object)
    return fail(ErrorKind::engine, "a result whose object grew after it came");
  const std::size_t bytes = frame.json.size();
  auto message = messages::decode_in_place(std::move(frame.json), frame.fds.size());
  if (message && bytes > longest_text(*message))
    return fail(ErrorKind::engine, "a '" + std::string(messages::name_of(*message)) + "' message of " +
                                       std::to_string(bytes) + " bytes (at most " +
                                       std::to_string(longest_text(*message)) + ")");
  if (const auto* result = message ? std::get_if<messages::RunResult>(&*message) : nullptr;
      result != nullptr && !output_is_utf8(*result))
    return fail(ErrorKind::engine, "a result whose output is not UTF-8");
  return message;
}

ProgramResult too_deep(const ReturnedValuesRefusal& refusal, messages::RunResult message, const Program& program) {
  const auto& instructions = program.instructions();
  std::size_t index = instructions.size() - 1;
  for (std::size_t i = 0; i < instructions.size(); ++i) {
    const auto* value = std::get_if<ReturnValue>(&instructions[i]);
    const auto* path = std::get_if<ReturnPath>(&instructions[i]);
    if ((value != nullptr && value->key == refusal.key) || (path != nullptr && path->key == refusal.key)) index = i;
  }
  ProgramResult result;
  result.stdout_output = {std::move(message.stdout_text), message.stdout_truncated};
  result.stderr_output = {std::move(message.stderr_text), message.stderr_truncated};
  result.elapsed_ms = message.elapsed_ms;
  InstructionError error;
  error.kind = ErrorKind::serialization;
  error.message = "return '" + refusal.key.substr(0, 200) + "': " + refusal.error.message;
  error.instruction_index = index;
  error.instruction_op = op_name(instructions[index]);
  if (auto id = instruction_id(instructions[index])) error.instruction_id = std::string(*id);
  result.error = std::move(error);
  return result;
}

Result<ProgramResult> decode_result(messages::RunResult message, std::vector<UniqueFd> fds, const ExecuteJob& job,
                                    const std::optional<std::string>& interfered_request_id) {
  if (message.part_sizes.size() > messages::kMaxResultParts)
    return fail(ErrorKind::engine, "a result with more than " + std::to_string(messages::kMaxResultParts) + " parts");
  ProgramResult result;
  result.results_json = std::move(message.results);
  result.stdout_output = {std::move(message.stdout_text), message.stdout_truncated};
  result.stderr_output = {std::move(message.stderr_text), message.stderr_truncated};
  result.elapsed_ms = message.elapsed_ms;
  if (!message.part_blobs.empty() && message.part_blobs.size() != message.part_sizes.size())
    return fail(ErrorKind::engine, "a result naming blobs for other parts than it has");
  std::uint64_t declared = 0;
  std::uint64_t in_file = 0;
  for (std::size_t i = 0; i < message.part_sizes.size(); ++i) {
    std::uint64_t size = message.part_sizes[i];
    if (size > job.admitted.max_returned_bytes - std::min(declared, job.admitted.max_returned_bytes))
      return fail(ErrorKind::engine, "result parts exceed the job's binary limit");
    declared += size;
    if (!messages::names_blob(message, i)) in_file += size;
  }
  std::optional<Blob> file;
  if (!fds.empty()) {
    auto parts = Blob::from_untrusted_fd(std::move(fds.front()), job.admitted.max_returned_bytes);
    if (!parts) return std::unexpected(parts.error());
    if (parts->size() != in_file) return fail(ErrorKind::engine, "the result parts are not the size declared");
    file = std::move(*parts);
  }
  std::size_t offset = 0;
  for (std::size_t i = 0; i < message.part_sizes.size(); ++i) {
    std::uint64_t size = message.part_sizes[i];
    if (messages::names_blob(message, i)) {
      // Only a blob this program was given, of the size it says: the front's own copy.
      auto blob = job.admitted.blobs.find(message.part_blobs[i]);
      if (blob == job.admitted.blobs.end() || blob->second.size() != size)
        return fail(ErrorKind::engine, "a result naming a blob its program was not given");
      result.parts.push_back(blob->second);
    } else {
      if (!file) return fail(ErrorKind::engine, "a result with parts and no memory file");
      result.parts.push_back(*file->slice(offset, size));
      offset += size;
    }
  }
  if (message.error) {
    messages::ErrorDetail& e = *message.error;
    if (!worker_may_report(e.kind))
      return fail(ErrorKind::engine, "a result with error kind '" + std::string(to_wire(e.kind)) + "'");
    if (e.index > job.admitted.program.instructions().size()) return fail(ErrorKind::engine, "a result failing past the program's end");
    if (e.cuda_call.has_value() != e.location.has_value())
      return fail(ErrorKind::engine, "a result with half a gpu_access detail");
    // Cut as the executor cuts them, whatever the worker sent.
    InstructionError error{e.kind, cut_error_message(std::move(e.message)), e.index,      e.op,
                           e.id,   cut_traceback(std::move(e.traceback)),    std::nullopt};
    if (e.cuda_call) error.gpu_access = GpuAccessDetail{*e.cuda_call, *e.location, interfered_request_id};
    result.error = std::move(error);
  }
  return result;
}

}  // namespace kcoral
