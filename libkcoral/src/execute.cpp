// The /execute pipeline: admit (parse, resolve, limits), then answer (encode, bound).
#include "kcoral/execute.hpp"

#include <algorithm>

namespace kcoral {
namespace {

// More GPUs than the program may hold is the client's to fix: the message says how many
// the server has and gives to one program.
std::optional<Error> check_gpu_count(const ProgramOptions& options, const ExecuteSettings& settings) {
  if (!options.gpu_count || *options.gpu_count <= settings.max_gpus_per_program) return std::nullopt;
  std::string asked = "'gpu_count' is " + std::to_string(*options.gpu_count);
  if (settings.server_gpus == 0) return Error{ErrorKind::parse, asked + ", but this is a CPU server: it has no GPU"};
  return Error{ErrorKind::parse, asked + ", but this server has " + std::to_string(settings.server_gpus) +
                                     (settings.server_gpus == 1 ? " GPU" : " GPUs") + " and gives a program at most " +
                                     std::to_string(settings.max_gpus_per_program)};
}

}  // namespace

std::variant<AdmittedRequest, ExecuteAnswer> admit_execute(std::string_view request_id, std::string_view content_type,
                                                           ReceivedBody& body, BlobStore& store,
                                                           std::string_view tenant, const ExecuteSettings& settings,
                                                           const BlobStore::CopyBudget& copies) {
  auto parsed = parse_execute_request(content_type, body, {});
  if (!parsed) return ExecuteAnswer{encode_error(request_id, parsed.error()), ResponseStatus::error, parsed.error(),
                                    std::nullopt};
  return admit_parsed(request_id, std::move(*parsed), store, tenant, settings, copies);
}

std::variant<AdmittedRequest, ExecuteAnswer> admit_parsed(std::string_view request_id, ExecuteRequest parsed,
                                                          BlobStore& store, std::string_view tenant,
                                                          const ExecuteSettings& settings,
                                                          const BlobStore::CopyBudget& copies) {
  auto error = [&](const Error& failure) {
    return ExecuteAnswer{encode_error(request_id, failure), ResponseStatus::error, failure, std::nullopt};
  };
  auto resolved = store.resolve(tenant, parsed.program, std::move(parsed.blobs), copies);
  if (!resolved) return error(resolved.error());
  if (!resolved->missing.empty())
    return ExecuteAnswer{encode_cache_miss(request_id, resolved->missing), ResponseStatus::cache_miss, std::nullopt,
                         std::move(parsed.program)};

  const ProgramOptions& options = parsed.program.options();
  if (auto refused = check_gpu_count(options, settings)) return error(*refused);

  AdmittedRequest request;
  request.timeout_seconds = std::min(options.timeout_seconds.value_or(settings.default_timeout_seconds),
                                     settings.max_timeout_seconds);
  request.output_limit_bytes = std::min(options.output_limit_bytes.value_or(settings.default_output_limit_bytes),
                                        settings.max_output_limit_bytes);
  request.max_returned_bytes = settings.max_response_bytes;
  request.program_json = std::move(parsed.program_json);
  request.program = std::move(parsed.program);
  request.blobs = std::move(resolved->blobs);
  request.pin = std::move(resolved->pin);
  return request;
}

ExecuteAnswer answer_execute(std::string_view request_id, Result<ProgramResult> outcome,
                             const ResponseTimings& timings, const ExecuteSettings& settings,
                             std::span<const int> gpu_ids) {
  // The executor stops encoding returns at the binary limit and says so with a request
  // kind, not an instruction's.
  if (outcome && outcome->error && !is_program_kind(outcome->error->kind))
    outcome = fail(outcome->error->kind, outcome->error->message);
  if (!outcome) return {encode_error(request_id, outcome.error()), ResponseStatus::error, outcome.error(), std::nullopt};
  const ResponseStatus status = outcome->completed() ? ResponseStatus::completed : ResponseStatus::failed;
  ExecuteAnswer answer{encode_program_response(request_id, std::move(*outcome), timings, gpu_ids), status,
                       std::nullopt, std::nullopt};
  if (answer.response.body.size() > settings.max_response_bytes) {
    Error too_large{ErrorKind::response_too_large, "the response (" + std::to_string(answer.response.body.size()) +
                                                       " bytes) exceeds the limit of " +
                                                       std::to_string(settings.max_response_bytes) + " bytes"};
    answer = {encode_error(request_id, too_large), ResponseStatus::error, too_large, std::nullopt};
  }
  return answer;
}

std::string cut_error_message(std::string message) {
  // What this cut makes (the bytes kept and its note) is left as it is.
  if (message.size() <= kErrorMessageBytes + kCutNoteBytes) return message;
  std::size_t end = kErrorMessageBytes;
  while (end > 0 && (static_cast<unsigned char>(message[end]) & 0xC0) == 0x80) --end;  // a character's start
  const std::size_t cut = message.size() - end;
  message.resize(end);
  return message + "... (" + std::to_string(cut) + " more bytes cut)";
}

std::string cut_traceback(std::string traceback) {
  return traceback.size() <= kTracebackBytes ? traceback : traceback.substr(traceback.size() - kTracebackBytes);
}

}  // namespace kcoral
