// The /execute pipeline, shared by the server and kcoral.run_local: a request body in,
// either the program to run (validated, its blobs resolved and checked, its limits set)
// or the answer to give at once; then the program's outcome in, the response out.
//
// Both callers go through these two steps, so a request is judged and answered the same
// way wherever it runs: the same validation (tensor byte counts too), the same clamping
// of timeouts and output limits, the same treatment of a response over its limit.
//
//   auto admitted = kcoral::admit_execute(id, content_type, body, store, tenant, settings);
//   if (auto* answer = std::get_if<kcoral::ExecuteAnswer>(&admitted)) return answer->response;
//   auto& request = std::get<kcoral::AdmittedRequest>(admitted);
//   ... run request.program with request.blobs ...
//   return kcoral::answer_execute(id, outcome, timings, settings).response;
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "kcoral/blob_store.hpp"
#include "kcoral/codec.hpp"
#include "kcoral/program.hpp"
#include "kcoral/program_result.hpp"

namespace kcoral {

// The server's flags (kcoral-server --help); run_local takes the defaults.
struct ExecuteSettings {
  double default_timeout_seconds = 300;
  double max_timeout_seconds = 900;
  std::uint64_t default_output_limit_bytes = 1ull << 20;
  std::uint64_t max_output_limit_bytes = 16ull << 20;
  std::uint64_t max_response_bytes = 256ull << 20;
  // GPUs of the server, and the most one program may hold (options.gpu_count); 0 and 0 on
  // a CPU server, where asking for any is a parse error.
  std::size_t server_gpus = 0;
  std::size_t max_gpus_per_program = 0;
};

// A program ready to run.
struct AdmittedRequest {
  std::string program_json;  // as received
  Program program;
  BlobMap blobs;
  BlobStore::Pin pin;  // keeps its cached blobs while it lives
  double timeout_seconds = 0;
  std::uint64_t output_limit_bytes = 0;
  std::uint64_t max_returned_bytes = 0;  // of its returned values
};

// A response, with its body's status (COMPLETED, FAILED, CACHE_MISS or ERROR), and for
// the server's records the request error (status ERROR) or the program (CACHE_MISS).
struct ExecuteAnswer {
  EncodedResponse response;
  ResponseStatus status = ResponseStatus::error;
  std::optional<Error> error;
  std::optional<Program> program;
};

// Parses and validates the request (`body` as parse_execute_request takes it: its blobs
// are kept where they are, and its bytes are empty afterwards), then resolves its blobs through `store` among those of
// `tenant` (the store keeps the supplied ones as that tenant's): the program to run, or the
// answer (400 for a bad request, CACHE_MISS naming the blobs to send, 503 when out of
// memory files or when `copies` refuses the bytes the store must make for this program:
// see BlobStore::resolve).
[[nodiscard]] std::variant<AdmittedRequest, ExecuteAnswer> admit_execute(
    std::string_view request_id, std::string_view content_type, ReceivedBody& body, BlobStore& store,
    std::string_view tenant, const ExecuteSettings& settings, const BlobStore::CopyBudget& copies = {});

// admit_execute's second half, for a caller that parsed the body itself
// (parse_execute_request): `parsed`'s blobs resolved, its limits set.
[[nodiscard]] std::variant<AdmittedRequest, ExecuteAnswer> admit_parsed(
    std::string_view request_id, ExecuteRequest parsed, BlobStore& store, std::string_view tenant,
    const ExecuteSettings& settings, const BlobStore::CopyBudget& copies = {});

// The response to a program's outcome: its result (COMPLETED or FAILED), or the request
// error it ended with. A result whose returns would not fit the response (as the executor
// reports it, or as encoded) is the request error response_too_large.
// `gpu_ids`: the GPUs the program held (encode_program_response).
[[nodiscard]] ExecuteAnswer answer_execute(std::string_view request_id, Result<ProgramResult> outcome,
                                           const ResponseTimings& timings, const ExecuteSettings& settings,
                                           std::span<const int> gpu_ids = {});

}  // namespace kcoral
