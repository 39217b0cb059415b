// The wire codec: an HTTP `POST /execute` body in, the response bodies out.
//
// One codec for the server, the in-process executor of the Python module and the C++
// tests. Requests are checked against every rule of docs/protocol.md before anything runs:
// multipart framing, exactly one `program` part, `blob:<sha256>` parts whose bytes hash
// to their name and which the program references, and the program itself.
//
//   auto request = kcoral::parse_execute_request(content_type, body, {});
//   if (!request) return kcoral::encode_error(id, request.error());
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kcoral/blob_store.hpp"
#include "kcoral/multipart.hpp"
#include "kcoral/program.hpp"
#include "kcoral/program_result.hpp"

namespace kcoral {

struct RequestLimits {
  MultipartLimits multipart;
  ProgramLimits program;
};

struct ExecuteRequest {
  Program program;
  std::string program_json;  // the `program` part as received
  BlobMap blobs;  // the blobs the request carried, verified; possibly fewer than referenced
};

[[nodiscard]] Result<ExecuteRequest> parse_execute_request(std::string_view content_type,
                                                           std::string_view body,
                                                           const RequestLimits& limits);

// A response body's status: its wire word (COMPLETED, FAILED, CACHE_MISS, ERROR), one table.
enum class ResponseStatus { completed, failed, cache_miss, error };
[[nodiscard]] std::string_view to_wire(ResponseStatus status);

struct EncodedResponse {
  int http_status = 200;
  std::string content_type;
  std::string body;
};

// Timings the front measures; docs/protocol.md, "The response".
struct ResponseTimings {
  double queue_ms = 0;
  double elapsed_ms = 0;
  double lease_wait_ms = 0;
  double lease_held_ms = 0;
};

// COMPLETED or FAILED: JSON when there are no binary parts, otherwise multipart with the
// JSON first as part `result`.
[[nodiscard]] EncodedResponse encode_program_response(std::string_view request_id,
                                                      const ProgramResult& result,
                                                      const ResponseTimings& timings);
[[nodiscard]] EncodedResponse encode_cache_miss(std::string_view request_id,
                                                const std::vector<std::string>& missing);
// An error outside a program, with the HTTP status of its kind.
[[nodiscard]] EncodedResponse encode_error(std::string_view request_id, const Error& error);

}  // namespace kcoral
