// MultipartDigests: the SHA-256 of each part of a multipart/form-data body, computed as
// the body arrives.
//
// A server that hashed an upload only once it had all of it would make its client wait for
// the hash after the last byte (37 ms for 64 MiB on one core). Fed the body as it grows,
// this hashes each part's data while the rest is still on its way. It follows the framing
// as parse_multipart does (the opening delimiter, a CRLF, headers up to a blank line, data
// up to the next CRLF and delimiter), and gives up at anything else; parse_multipart stays
// the judge of the body, and a digest from here is used only for exactly the range of bytes
// it was computed over. Parts under kRecordedFrom bytes are not recorded (hashing them later
// costs next to nothing), so what is kept stays a small fraction of the body however many
// parts it has.
//
//   kcoral::MultipartDigests digests(content_type);
//   digests.advance(body_so_far);    // after each read, the body whole so far
//   if (const std::string* digest = digests.digest_of(offset, size)) ...
//   auto parts = kcoral::parse_multipart(content_type, body, {}, &digests);  // no search again
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcoral/sha256.hpp"

namespace kcoral {

class MultipartDigests {
 public:
  MultipartDigests() = default;  // hashes nothing
  static constexpr std::size_t kRecordedFrom = std::size_t{64} << 10;

  // For a body of this Content-Type; one that is not multipart/form-data with a valid
  // boundary hashes nothing. Digests of parts under `record_from` bytes are not kept.
  explicit MultipartDigests(std::string_view content_type, std::size_t record_from = kRecordedFrom);

  // The body so far: the bytes of the last call, and maybe more after them.
  void advance(std::string_view body);
  // The digest of the part whose data is body[offset, offset + size), if one was computed.
  [[nodiscard]] const std::string* digest_of(std::size_t offset, std::size_t size) const;
  // The size of the part whose data starts at `offset`, if its digest was kept: its data
  // ends where the first CRLF and delimiter from `offset` on begins, which parse_multipart
  // then need not search for again.
  [[nodiscard]] std::optional<std::size_t> size_at(std::size_t offset) const;

 private:
  struct Digest {
    std::size_t offset;
    std::size_t size;
    std::string hex;
  };
  enum class State { opening, after_delimiter, headers, data, done };

  [[nodiscard]] const Digest* starting_at(std::size_t offset) const;

  std::size_t record_from_ = 0;
  std::string delimiter_;  // "--" boundary
  std::string separator_;  // CRLF "--" boundary
  State state_ = State::done;
  std::size_t position_ = 0;    // where the current state's bytes start
  std::size_t scanned_ = 0;     // searched up to here without finding what the state seeks
  std::size_t data_start_ = 0;  // of the part being hashed
  std::size_t hashed_ = 0;      // its data hashed up to here
  std::size_t parts_ = 0;       // begun so far
  std::optional<Sha256> hash_;
  std::vector<Digest> digests_;  // by offset
};

}  // namespace kcoral
