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

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kcoral/blob.hpp"
#include "kcoral/blob_file.hpp"
#include "kcoral/blob_store.hpp"
#include "kcoral/multipart.hpp"
#include "kcoral/multipart_digests.hpp"
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

// A request body as a server receives it: its bytes in a memfd, and the digests of its
// parts computed as they came (so that an upload is hashed while it arrives, not after).
struct ReceivedBody {
  BlobFile bytes;
  MultipartDigests digests;
};

// The memory a request's parse takes beyond its body, held in the caller's budget (both
// set, or neither). Before the program part is parsed, `hold` is asked for the most it
// takes: `bytes` in all, of which `program_bytes` are its text's parse
// (Program::parse_memory_bound) and the rest the parts' records and the parser's own
// buffers; its error refuses the request. Once it is parsed, `keep` says how much of that
// the request keeps until it is answered (the program, its text's copy, its blobs'
// entries): the rest may be given back.
struct ParseBudget {
  std::function<Status(std::uint64_t bytes, std::uint64_t program_bytes)> hold;
  std::function<void(std::uint64_t kept)> keep;
};

// `body` as it was received: a blob whose digest came with it is not hashed again; the
// blobs are kept as slices of its memfd, the rest of it zeroed, and `body.bytes` is empty
// afterwards (BlobFile::keep).
[[nodiscard]] Result<ExecuteRequest> parse_execute_request(std::string_view content_type, ReceivedBody& body,
                                                           const RequestLimits& limits,
                                                           const ParseBudget& budget = {});
// The same for a body in memory: it is copied into a BlobFile first, and hashed there.
[[nodiscard]] Result<ExecuteRequest> parse_execute_request(std::string_view content_type,
                                                           std::string_view body,
                                                           const RequestLimits& limits,
                                                           const ParseBudget& budget = {});

// A response body's status: its wire word (COMPLETED, FAILED, CACHE_MISS, ERROR), one table.
enum class ResponseStatus { completed, failed, cache_miss, error };
[[nodiscard]] std::string_view to_wire(ResponseStatus status);

// A response's body as it is sent: text, and between it the returned values' blobs, each
// sent from its memory file as it lies rather than copied into the body (a 256 MiB answer
// costs the server its 256 MiB once, not twice).
class ResponseBody {
 public:
  using Piece = std::variant<std::string, Blob>;
  ResponseBody() = default;
  ResponseBody(std::string text) { append(std::move(text)); }  // NOLINT: a body of text alone
  // Joined to the text before it while the two make at most 64 KiB: few pieces, and no
  // large text copied.
  void append(std::string text);
  void append(Blob blob);
  [[nodiscard]] const std::vector<Piece>& pieces() const { return pieces_; }
  // A piece's bytes, text or blob alike; they live as long as the piece.
  [[nodiscard]] static std::string_view bytes_of(const Piece& piece) {
    if (const auto* text = std::get_if<std::string>(&piece)) return *text;
    return std::get<Blob>(piece).view();
  }
  [[nodiscard]] std::uint64_t size() const { return size_; }
  // The whole body in one string: a copy of every piece, for a reader that wants one.
  [[nodiscard]] std::string joined() const;

 private:
  std::vector<Piece> pieces_;
  std::uint64_t size_ = 0;
};

struct EncodedResponse {
  int http_status = 200;
  std::string content_type;
  ResponseBody body;
};

// Timings the front measures; docs/protocol.md, "The response".
struct ResponseTimings {
  double queue_ms = 0;
  double elapsed_ms = 0;
  double lease_wait_ms = 0;
  double lease_held_ms = 0;
};

// COMPLETED or FAILED: JSON when there are no binary parts, otherwise multipart with the
// JSON first as part `result`. `gpu_ids`: the GPUs the program held, by the server's
// index (`gpu_ids` and `gpu_count` in the response; neither when empty).
// `result`'s texts are moved into the body (the returned values whole, as a piece of their
// own: a 256 MiB answer is not copied once more).
[[nodiscard]] EncodedResponse encode_program_response(std::string_view request_id,
                                                      ProgramResult&& result,
                                                      const ResponseTimings& timings,
                                                      std::span<const int> gpu_ids = {});
[[nodiscard]] EncodedResponse encode_cache_miss(std::string_view request_id,
                                                const std::vector<std::string>& missing);
// An error outside a program, with the HTTP status of its kind.
[[nodiscard]] EncodedResponse encode_error(std::string_view request_id, const Error& error);

}  // namespace kcoral
