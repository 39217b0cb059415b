// Requests: multipart parts to a validated Program and its verified blobs.
#include <algorithm>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "kcoral/codec.hpp"
#include "kcoral/sha256.hpp"

namespace kcoral {

Result<ExecuteRequest> parse_execute_request(std::string_view content_type, ReceivedBody& received,
                                             const RequestLimits& limits, const ParseBudget& budget) {
  BlobFile& body = received.bytes;
  auto parts = parse_multipart(content_type, body.view(), limits.multipart, &received.digests);
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

  // Beside the program's own: each part's record and digest while the body is parsed, and
  // then each blob's entries where the request keeps it (its map, its pin, its resolution),
  // as measured with 100,000 blobs of a few bytes. A part over its limit is refused by the
  // parse at once, as such.
  constexpr std::uint64_t kBytesPerBlob = 768;
  constexpr std::uint64_t kParserBuffers = std::uint64_t{1} << 20;
  if (budget.hold && program_part->data.size() <= limits.program.max_program_bytes) {
    const std::uint64_t program_bytes = Program::parse_memory_bound(program_part->data);
    KCORAL_TRY(budget.hold(program_bytes + kParserBuffers + parts->size() * kBytesPerBlob, program_bytes));
  }
  auto program = Program::parse(program_part->data, limits.program);
  if (budget.keep)
    budget.keep(program ? program->memory_bytes() + program_part->data.size() + program->blobs().size() * kBytesPerBlob
                        : 0);
  if (!program) return std::unexpected(program.error());

  std::unordered_set<std::string_view> referenced(program->blobs().begin(), program->blobs().end());
  for (auto& [digest, part] : blob_parts)
    if (!referenced.contains(digest))
      return fail(ErrorKind::parse, "blob " + digest + " is not referenced by any instruction");
  // Where each blob lies in the body; parts come in the body's order.
  std::vector<BlobFile::Range> ranges;
  for (const auto& [digest, part] : blob_parts)
    ranges.push_back({static_cast<std::size_t>(part->data.data() - body.data()), part->data.size()});
  // Digests computed as the body arrived stand for exactly their range; the rest are
  // computed now.
  std::vector<std::string> actual(blob_parts.size());
  std::vector<std::size_t> unhashed;
  std::vector<std::span<const std::byte>> pieces;
  for (std::size_t i = 0; i < blob_parts.size(); ++i) {
    if (const std::string* known = received.digests.digest_of(ranges[i].offset, ranges[i].size)) {
      actual[i] = *known;
    } else {
      unhashed.push_back(i);
      pieces.push_back(std::as_bytes(std::span(blob_parts[i].second->data)));
    }
  }
  std::vector<std::string> computed = sha256_hex_each(pieces);
  for (std::size_t k = 0; k < unhashed.size(); ++k) actual[unhashed[k]] = std::move(computed[k]);
  for (std::size_t i = 0; i < blob_parts.size(); ++i)
    if (actual[i] != blob_parts[i].first)
      return fail(ErrorKind::parse, "blob part " + blob_parts[i].first + " does not match its content (SHA-256 " +
                                        actual[i] + ")");
  // The blobs stay where they arrived, in the body's memfd: one descriptor however many
  // there are, and no copy of their bytes.
  std::string program_json(program_part->data);
  auto blobs = body.keep(ranges);
  if (!blobs) return std::unexpected(blobs.error());
  ExecuteRequest request{std::move(*program), std::move(program_json), {}};
  for (std::size_t i = 0; i < blob_parts.size(); ++i)
    request.blobs.emplace(std::move(blob_parts[i].first), std::move((*blobs)[i]));
  return request;
}

Result<ExecuteRequest> parse_execute_request(std::string_view content_type, std::string_view body,
                                             const RequestLimits& limits, const ParseBudget& budget) {
  ReceivedBody received;
  if (!received.bytes.append(body))
    return fail(ErrorKind::busy, "no memory for the request's " + std::to_string(body.size()) + " bytes; retry later");
  return parse_execute_request(content_type, received, limits, budget);
}

}  // namespace kcoral
