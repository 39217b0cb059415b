// Fuzz target: parse_multipart (libkcoral/src/multipart.cpp), the framing of every request
// the server reads.
//
// Input: a Content-Type value, a newline, then the body (request_input.hpp). Beyond what
// the sanitizers catch, it checks that accepted parts are views into the body, in order and
// apart; that tighter limits never accept what the defaults refuse, and agree when both
// accept; that encode_multipart writes the parts so that they parse back the same; and
// that MultipartDigests, fed the body in pieces as a connection brings it and keeping
// parts of any size, gives each accepted part's SHA-256 for exactly its range; and that
// parse_multipart given those digests (which end parts without a search) reads any body,
// accepted or refused, exactly as it does without them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "invariant.hpp"
#include "kcoral/multipart.hpp"
#include "kcoral/multipart_digests.hpp"
#include "kcoral/sha256.hpp"
#include "request_input.hpp"

namespace {

bool same_parts(const std::vector<kcoral::MultipartPart>& a, const std::vector<kcoral::MultipartPart>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.name == y.name && x.content_type == y.content_type && x.data == y.data;
  });
}

// encode_multipart writes a name between quotes as it is: it is made for its own names
// ("result", "return:N"), and a quote or a backslash in one would not come back.
bool encodable(const kcoral::MultipartPart& part) { return part.name.find_first_of("\"\\") == std::string::npos; }

void check_views(std::string_view body, const std::vector<kcoral::MultipartPart>& parts) {
  const char* previous_end = body.data();
  for (const kcoral::MultipartPart& part : parts) {
    KCORAL_INVARIANT(!part.name.empty());
    KCORAL_INVARIANT(part.data.data() >= previous_end);
    KCORAL_INVARIANT(part.data.data() + part.data.size() <= body.data() + body.size());
    previous_end = part.data.data() + part.data.size();
  }
}

void check_round_trip(const std::vector<kcoral::MultipartPart>& parts) {
  if (!std::all_of(parts.begin(), parts.end(), encodable)) return;
  std::vector<kcoral::OutgoingPart> outgoing;
  for (const kcoral::MultipartPart& part : parts) outgoing.push_back({part.name, part.content_type, part.data});
  kcoral::EncodedMultipart encoded = kcoral::encode_multipart(outgoing);
  // The encoder's header lines may be longer than the ones parsed (spelled out in full).
  kcoral::MultipartLimits roomy{parts.size(), 1 << 20};
  auto again = kcoral::parse_multipart(encoded.content_type, encoded.body, roomy);
  KCORAL_INVARIANT(again.has_value());
  KCORAL_INVARIANT(same_parts(parts, *again));
}

kcoral::MultipartDigests digests_of(std::string_view content_type, std::string_view body) {
  const std::size_t step = 1 + body.size() % 251;  // pieces of one size per input, from 1 byte
  kcoral::MultipartDigests digests(content_type, /*record_from=*/0);
  for (std::size_t size = 0; size < body.size();) {
    size = std::min(body.size(), size + step);
    digests.advance(body.substr(0, size));
  }
  return digests;
}

void check_digests(const kcoral::MultipartDigests& digests, std::string_view body,
                   const std::vector<kcoral::MultipartPart>& parts) {
  for (const kcoral::MultipartPart& part : parts) {
    const std::string* digest =
        digests.digest_of(static_cast<std::size_t>(part.data.data() - body.data()), part.data.size());
    KCORAL_INVARIANT(digest != nullptr && *digest == kcoral::sha256_hex(part.data));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto [content_type, body] = kcoral::fuzz::split_request_input(data, size);
  const kcoral::MultipartLimits defaults{};
  const kcoral::MultipartLimits tight{3, 200};
  auto parts = kcoral::parse_multipart(content_type, body, defaults);
  auto tight_parts = kcoral::parse_multipart(content_type, body, tight);
  const kcoral::MultipartDigests digests = digests_of(content_type, body);
  auto shortcut = kcoral::parse_multipart(content_type, body, defaults, &digests);
  KCORAL_INVARIANT(shortcut.has_value() == parts.has_value());
  if (parts) {
    KCORAL_INVARIANT(same_parts(*parts, *shortcut));
    for (std::size_t i = 0; i < parts->size(); ++i)
      KCORAL_INVARIANT((*parts)[i].data.data() == (*shortcut)[i].data.data());
  }
  if (!parts) KCORAL_INVARIANT(shortcut.error().message == parts.error().message);
  if (tight_parts) {
    KCORAL_INVARIANT(tight_parts->size() <= tight.max_parts);
    KCORAL_INVARIANT(parts.has_value() && same_parts(*parts, *tight_parts));
  }
  if (!parts) {
    KCORAL_INVARIANT(parts.error().kind == kcoral::ErrorKind::parse);
    return 0;
  }
  KCORAL_INVARIANT(!parts->empty() && parts->size() <= defaults.max_parts);
  check_views(body, *parts);
  check_round_trip(*parts);
  check_digests(digests, body, *parts);
  return 0;
}
