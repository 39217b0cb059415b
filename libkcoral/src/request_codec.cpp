// Requests: multipart parts to a validated Program and its verified blobs.
#include <system_error>
#include <thread>
#include <unordered_set>

#include "kcoral/codec.hpp"
#include "kcoral/sha256.hpp"

namespace kcoral {
namespace {

// From this many blob bytes in a request, their digests are computed on a thread of their
// own while the blobs are copied into their memory file (each pass reads every byte once;
// together they take the time of the slower, the hash, instead of both).
constexpr std::size_t kHashAlongsideBytes = std::size_t{1} << 20;

}  // namespace

Result<ExecuteRequest> parse_execute_request(std::string_view content_type, std::string_view body,
                                             const RequestLimits& limits) {
  auto parts = parse_multipart(content_type, body, limits.multipart);
  if (!parts) return std::unexpected(parts.error());

  const MultipartPart* program_part = nullptr;
  std::vector<std::pair<std::string, const MultipartPart*>> blob_parts;
  std::unordered_set<std::string_view> seen;
  for (const MultipartPart& part : *parts) {
    if (part.name == "program") {
      if (program_part != nullptr) return fail(ErrorKind::parse, "the request has two 'program' parts");
      if (part.content_type != "application/json")
        return fail(ErrorKind::parse, "the 'program' part must be application/json");
      program_part = &part;
      continue;
    }
    if (!part.name.starts_with("blob:"))
      return fail(ErrorKind::parse, "unexpected multipart part '" + part.name.substr(0, 80) +
                                        "' (expected 'program' or 'blob:<sha256>')");
    std::string digest = part.name.substr(5);
    if (!is_sha256_hex(digest))
      return fail(ErrorKind::parse, "malformed blob part name '" + part.name.substr(0, 80) +
                                        "': expected blob:<64 lowercase hex digits>");
    if (!seen.insert(std::string_view(part.name).substr(5)).second)
      return fail(ErrorKind::parse, "the request has two parts for blob " + digest);
    if (part.content_type != "application/octet-stream")
      return fail(ErrorKind::parse, "blob part " + digest + " must be application/octet-stream");
    blob_parts.emplace_back(std::move(digest), &part);
  }
  if (program_part == nullptr) return fail(ErrorKind::parse, "the request has no 'program' part");

  auto program = Program::parse(program_part->data, limits.program);
  if (!program) return std::unexpected(program.error());

  std::unordered_set<std::string_view> referenced(program->blobs().begin(), program->blobs().end());
  std::size_t blob_bytes = 0;
  for (auto& [digest, part] : blob_parts) {
    if (!referenced.contains(digest))
      return fail(ErrorKind::parse, "blob " + digest + " is not referenced by any instruction");
    blob_bytes += part->data.size();
  }
  std::vector<std::string> actual(blob_parts.size());
  auto hash_all = [&] {
    for (std::size_t i = 0; i < blob_parts.size(); ++i) actual[i] = sha256_hex(blob_parts[i].second->data);
  };
  auto check_all = [&]() -> Status {
    for (std::size_t i = 0; i < blob_parts.size(); ++i)
      if (actual[i] != blob_parts[i].first)
        return fail(ErrorKind::parse, "blob part " + blob_parts[i].first + " does not match its content (SHA-256 " +
                                          actual[i] + ")");
    return {};
  };
  std::jthread hasher;
  if (blob_bytes >= kHashAlongsideBytes) {
    try {
      hasher = std::jthread(hash_all);
    } catch (const std::system_error&) {  // no thread to be had: one pass after the other
    }
  }
  if (!hasher.joinable()) {
    hash_all();
    KCORAL_TRY(check_all());
  }
  // All of the request's blobs in one memfd: one descriptor however many there are.
  BlobBuilder file(BlobBuilder::kMappableFrom);
  for (const auto& [digest, part] : blob_parts)
    KCORAL_TRY(file.append(part->data));
  if (hasher.joinable()) {
    hasher.join();
    KCORAL_TRY(check_all());
  }
  auto blobs = file.finish();
  if (!blobs) return std::unexpected(blobs.error());
  ExecuteRequest request{std::move(*program), std::string(program_part->data), {}};
  for (std::size_t i = 0; i < blob_parts.size(); ++i)
    request.blobs.emplace(std::move(blob_parts[i].first), std::move((*blobs)[i]));
  return request;
}

}  // namespace kcoral
