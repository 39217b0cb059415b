// Fuzz target: parse_execute_request (libkcoral/src/request_codec.cpp), the whole
// `POST /execute` body: multipart framing, the parts' names and types, the blobs' digests
// and the program.
//
// Input: a Content-Type value, a newline, then the body (request_input.hpp). Beyond what
// the sanitizers catch, it checks what an accepted request promises: the program is the
// `program` part's text, and every blob carried is one the program references, holding
// bytes whose SHA-256 is its name; the blobs share one memfd (the body's), in which every
// byte outside them is zero, so a worker given it reads the blobs and nothing else. And a
// blob store resolving it asks its budget for exactly the bytes to_make said it would.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "invariant.hpp"
#include "kcoral/blob_store.hpp"
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
  if (request->blobs.empty()) return 0;
  {
    kcoral::BlobStore store(std::size_t{1} << 30);
    std::uint64_t said = store.to_make("fuzz", request->program, request->blobs).bytes;
    std::uint64_t asked = 0;
    auto resolved = store.resolve("fuzz", request->program, request->blobs, [&](std::uint64_t bytes) {
      asked += bytes;
      return true;
    });
    KCORAL_INVARIANT(!resolved || asked == said);
  }
  const kcoral::Blob& any = request->blobs.begin()->second;
  std::vector<bool> kept(any.file_size(), false);
  for (const auto& [digest, blob] : request->blobs) {
    KCORAL_INVARIANT(blob.fd() == any.fd() || blob.size() == 0);
    for (std::size_t i = 0; i < blob.size(); ++i) kept[blob.offset() + i] = true;
  }
  auto whole = kcoral::Blob::from_fd(kcoral::UniqueFd(::dup(any.fd())));
  KCORAL_INVARIANT(whole.has_value() && whole->size() == any.file_size());
  std::string_view bytes = whole->view();
  for (std::size_t i = 0; i < bytes.size(); ++i) KCORAL_INVARIANT(kept[i] || bytes[i] == '\0');
  return 0;
}
