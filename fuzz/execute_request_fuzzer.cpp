// Fuzz target: parse_execute_request (libkcoral/src/request_codec.cpp), the whole
// `POST /execute` body: multipart framing, the parts' names and types, the blobs' digests
// and the program.
//
// Input: a Content-Type value, a newline, then the body (request_input.hpp). Beyond what
// the sanitizers catch, it checks what an accepted request promises: the program is the
// `program` part's text, and every blob carried is one the program references, holding
// bytes whose SHA-256 is its name.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "invariant.hpp"
#include "kcoral/codec.hpp"
#include "kcoral/sha256.hpp"
#include "request_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto [content_type, body] = kcoral::fuzz::split_request_input(data, size);
  auto request = kcoral::parse_execute_request(content_type, body, {});
  if (!request) {
    KCORAL_INVARIANT(request.error().kind == kcoral::ErrorKind::parse ||
                     request.error().kind == kcoral::ErrorKind::busy ||  // out of memory files
                     request.error().kind == kcoral::ErrorKind::engine);
    return 0;
  }
  KCORAL_INVARIANT(body.find(request->program_json) != std::string_view::npos);
  KCORAL_INVARIANT(request->program.to_json() == kcoral::Program::parse(request->program_json)->to_json());
  const std::vector<std::string>& referenced = request->program.blobs();
  KCORAL_INVARIANT(request->blobs.size() <= referenced.size());
  for (const auto& [digest, blob] : request->blobs) {
    KCORAL_INVARIANT(std::find(referenced.begin(), referenced.end(), digest) != referenced.end());
    KCORAL_INVARIANT(kcoral::sha256_hex(blob.view()) == digest);
  }
  return 0;
}
