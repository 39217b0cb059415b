// Encoding of run requests and results for the worker channel.
#include "worker_protocol.hpp"

#include <nlohmann/json.hpp>

namespace kcoral {

using Json = nlohmann::json;

Status send_run(const Channel& channel, const RunRequest& request, const BlobMap& blobs) {
  Json digests = Json::array();
  std::vector<int> fds;
  auto flush = [&]() -> Status {
    if (fds.empty()) return {};
    Status sent = channel.send(Json{{"type", "blobs"}, {"digests", digests}}.dump(), fds);
    digests = Json::array();
    fds.clear();
    return sent;
  };
  for (const auto& [digest, blob] : blobs) {
    digests.push_back(digest);
    fds.push_back(blob.fd());
    if (fds.size() == Channel::kMaxFds - 1)
      if (auto status = flush(); !status) return status;
  }
  if (auto status = flush(); !status) return status;
  Json run{{"type", "run"},
           {"request_id", request.request_id},
           {"output_limit_bytes", request.output_limit_bytes},
           {"max_binary_bytes", request.max_binary_bytes},
           {"program", request.program_json}};
  return channel.send(run.dump());
}

Status send_result(const Channel& channel, const ProgramResult& result, bool continues) {
  Json message{{"type", "result"},
               {"continues", continues},
               {"results", result.results_json},
               {"stdout", result.stdout_output.text},
               {"stdout_truncated", result.stdout_output.truncated},
               {"stderr", result.stderr_output.text},
               {"stderr_truncated", result.stderr_output.truncated},
               {"elapsed_ms", result.elapsed_ms},
               {"parts", result.parts.size()}};
  if (const auto& error = result.error) {
    Json e{{"kind", to_wire(error->kind)},
           {"message", error->message},
           {"index", error->instruction_index},
           {"op", error->instruction_op},
           {"traceback", error->traceback}};
    if (error->instruction_id) e["id"] = *error->instruction_id;
    if (error->gpu_access) {
      e["cuda_call"] = error->gpu_access->cuda_call;
      e["location"] = error->gpu_access->location;
    }
    message["error"] = std::move(e);
  }
  std::string text = message.dump(-1, ' ', false, Json::error_handler_t::replace);
  // Parts beyond one message's descriptor budget go first, in order, as "parts" messages.
  std::vector<int> fds;
  for (const Blob& part : result.parts) fds.push_back(part.fd());
  std::size_t sent = 0;
  while (fds.size() - sent > Channel::kMaxFds - 1) {
    std::vector<int> batch(fds.begin() + static_cast<std::ptrdiff_t>(sent),
                           fds.begin() + static_cast<std::ptrdiff_t>(sent + Channel::kMaxFds - 1));
    if (auto status = channel.send(R"({"type":"parts"})", batch); !status) return status;
    sent += batch.size();
  }
  return channel.send(text, std::vector<int>(fds.begin() + static_cast<std::ptrdiff_t>(sent), fds.end()));
}

Result<ProgramResult> decode_result(Message message) {
  try {
    Json json = Json::parse(message.json);
    ProgramResult result;
    result.results_json = json.at("results").get<std::string>();
    result.stdout_output = {json.at("stdout").get<std::string>(), json.at("stdout_truncated").get<bool>()};
    result.stderr_output = {json.at("stderr").get<std::string>(), json.at("stderr_truncated").get<bool>()};
    result.elapsed_ms = json.at("elapsed_ms").get<double>();
    for (UniqueFd& fd : message.fds) {
      auto blob = Blob::from_fd(std::move(fd));
      if (!blob) return std::unexpected(blob.error());
      result.parts.push_back(std::move(*blob));
    }
    if (json.contains("error")) {
      const Json& e = json.at("error");
      InstructionError error;
      error.kind = error_kind_from_wire(e.at("kind").get<std::string>()).value_or(ErrorKind::engine);
      error.message = e.at("message").get<std::string>();
      error.instruction_index = e.at("index").get<std::size_t>();
      error.instruction_op = e.at("op").get<std::string>();
      error.traceback = e.at("traceback").get<std::string>();
      if (e.contains("id")) error.instruction_id = e.at("id").get<std::string>();
      if (e.contains("cuda_call"))
        error.gpu_access = GpuAccessDetail{e.at("cuda_call").get<std::string>(),
                                           e.at("location").get<std::string>(), std::nullopt};
      result.error = std::move(error);
    }
    return result;
  } catch (const std::exception& e) {
    return fail(ErrorKind::engine, std::string("malformed result from a worker: ") + e.what());
  }
}

std::string message_type(const std::string& json) {
  Json parsed = Json::parse(json, nullptr, false);
  if (!parsed.is_object() || !parsed.contains("type") || !parsed["type"].is_string()) return "";
  return parsed["type"].get<std::string>();
}

}  // namespace kcoral
