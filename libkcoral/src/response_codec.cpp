// Responses: COMPLETED/FAILED programs, CACHE_MISS, and errors outside a program.
#include <nlohmann/json.hpp>

#include "kcoral/codec.hpp"

namespace kcoral {

std::string_view to_wire(ResponseStatus status) {
  switch (status) {
    case ResponseStatus::completed: return "COMPLETED";
    case ResponseStatus::failed: return "FAILED";
    case ResponseStatus::cache_miss: return "CACHE_MISS";
    case ResponseStatus::error: return "ERROR";
  }
  return "ERROR";
}
namespace {

using Json = nlohmann::ordered_json;

std::string dump(const Json& value) {
  // Captured output is decoded leniently upstream; replacing here too means no text can
  // make serialization throw.
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json error_object(const InstructionError& error) {
  Json out{{"kind", to_wire(error.kind)},
           {"message", error.message},
           {"instruction_index", error.instruction_index},
           {"instruction_op", error.instruction_op},
           {"instruction_id", error.instruction_id ? Json(*error.instruction_id) : Json(nullptr)},
           {"traceback", error.traceback}};
  if (error.kind == ErrorKind::gpu_access) {
    const GpuAccessDetail detail = error.gpu_access.value_or(GpuAccessDetail{});
    out["cuda_call"] = detail.cuda_call;
    out["location"] = detail.location;
    out["interfered_request_id"] =
        detail.interfered_request_id ? Json(*detail.interfered_request_id) : Json(nullptr);
  }
  return out;
}

EncodedResponse json_response(int status, const Json& body) {
  return {status, "application/json", dump(body)};
}

}  // namespace

EncodedResponse encode_program_response(std::string_view request_id, ProgramResult&& result,
                                        const ResponseTimings& timings, std::span<const int> gpu_ids) {
  Json head{{"status", to_wire(result.completed() ? ResponseStatus::completed : ResponseStatus::failed)},
            {"request_id", request_id},
            {"queue_ms", timings.queue_ms},
            {"elapsed_ms", timings.elapsed_ms},
            {"lease_wait_ms", timings.lease_wait_ms},
            {"lease_held_ms", timings.lease_held_ms}};
  if (!gpu_ids.empty()) {
    head["gpu_ids"] = std::vector<int>(gpu_ids.begin(), gpu_ids.end());
    head["gpu_count"] = gpu_ids.size();
  }
  // The output moves into the JSON that writes it (it may be tens of megabytes): held as
  // text and as its JSON, never twice as text.
  Json tail{{"stdout", nullptr}, {"stderr", nullptr}};
  tail["stdout"] = std::move(result.stdout_output.text);
  tail["stderr"] = std::move(result.stderr_output.text);
  tail["stdout_truncated"] = result.stdout_output.truncated;
  tail["stderr_truncated"] = result.stderr_output.truncated;
  if (result.error) tail["error"] = error_object(*result.error);
  // `results_json` is spliced in as the executor wrote it: Python's own JSON encoder made
  // it, and integers wider than 64 bits must reach the client exactly.
  std::string before = dump(head);
  before.pop_back();
  before.append(",\"results\":");
  std::string after = dump(tail);
  tail = nullptr;
  after.shrink_to_fit();  // it grew by doubling: the answer holds what it writes, no more
  after.front() = ',';
  if (result.parts.empty()) {  // the values as they came, not copied
    ResponseBody body(std::move(before));
    body.append(std::move(result.results_json));
    body.append(std::move(after));
    return {200, "application/json", std::move(body)};
  }
  // The values' own buffer becomes the JSON part: it keeps the room of the worker's frame
  // they came in, which held about as much besides, unless that room was let go
  // (messages::decode_in_place), so the values are seldom copied a second time.
  std::string json = std::move(result.results_json);
  json.insert(0, before);
  json.append(after);
  std::vector<std::string> names;
  names.reserve(result.parts.size());
  std::vector<OutgoingPart> parts{{"result", "application/json", json}};
  for (std::size_t i = 0; i < result.parts.size(); ++i) names.push_back("return:" + std::to_string(i));
  for (std::size_t i = 0; i < result.parts.size(); ++i)
    parts.push_back({names[i], "application/octet-stream", result.parts[i].view()});
  // The JSON part is text; each returned value goes out from its blob, uncopied.
  MultipartFrame frame = frame_multipart(parts);
  ResponseBody body(std::move(frame.texts[0]));
  body.append(std::move(json));
  for (std::size_t i = 0; i < result.parts.size(); ++i) {
    body.append(std::move(frame.texts[i + 1]));
    body.append(result.parts[i]);
  }
  body.append(std::move(frame.texts.back()));
  return {200, std::move(frame.content_type), std::move(body)};
}

void ResponseBody::append(std::string text) {
  constexpr std::size_t kJoinedBytes = std::size_t{64} << 10;
  size_ += text.size();
  auto* last = pieces_.empty() ? nullptr : std::get_if<std::string>(&pieces_.back());
  if (last != nullptr && last->size() + text.size() <= kJoinedBytes) last->append(text);
  else pieces_.emplace_back(std::move(text));
}

void ResponseBody::append(Blob blob) {
  size_ += blob.size();
  pieces_.emplace_back(std::move(blob));
}

std::string ResponseBody::joined() const {
  std::string out;
  out.reserve(size_);
  for (const Piece& piece : pieces_) out.append(bytes_of(piece));
  return out;
}

EncodedResponse encode_cache_miss(std::string_view request_id,
                                  const std::vector<std::string>& missing) {
  return json_response(
      200, Json{{"status", to_wire(ResponseStatus::cache_miss)}, {"request_id", request_id}, {"missing_blobs", missing}});
}

EncodedResponse encode_error(std::string_view request_id, const Error& error) {
  return json_response(http_status(error.kind),
                       Json{{"status", to_wire(ResponseStatus::error)},
                            {"request_id", request_id},
                            {"error", {{"kind", to_wire(error.kind)}, {"message", error.message}}}});
}

}  // namespace kcoral
