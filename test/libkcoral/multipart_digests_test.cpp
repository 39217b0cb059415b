// MultipartDigests (libkcoral/src/multipart_digests.cpp): a multipart body fed as it grows,
// in pieces of every size, gives each large part's SHA-256 for exactly the range
// parse_multipart finds; small parts and bodies it cannot follow give no digests rather
// than wrong ones.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kcoral/multipart.hpp"
#include "kcoral/multipart_digests.hpp"
#include "kcoral/sha256.hpp"

namespace {

// Feeds `body` to `digests` as a connection would bring it: `step` bytes at a time.
void feed(kcoral::MultipartDigests& digests, std::string_view body, std::size_t step) {
  for (std::size_t size = 0; size < body.size();) {
    size = std::min(body.size(), size + step);
    digests.advance(body.substr(0, size));
  }
}

constexpr std::size_t kLarge = kcoral::MultipartDigests::kRecordedFrom;

// The parts' data hold pieces of their own delimiter, CRLFs and dashes, so that a hasher
// that cut a part at the wrong place would show.
kcoral::EncodedMultipart tricky_body(const std::string& boundary_hint) {
  static const std::string program = R"({"instructions":[]})";
  static const std::string first = [&] {
    std::string text;
    while (text.size() < kLarge) text += "\r\n--" + boundary_hint + "\r\n-\r\n--\r";
    return text;
  }();
  static const std::string second(kLarge + 3, '\r');
  static const std::string empty;
  return kcoral::encode_multipart({{"program", "application/json", program},
                                   {"blob:a", "application/octet-stream", first},
                                   {"blob:b", "application/octet-stream", second},
                                   {"blob:c", "application/octet-stream", empty}});
}

}  // namespace

TEST_SUITE("multipart_digests") {

TEST_CASE("fed in pieces of any size, every large part's digest is its data's, at its exact range") {
  kcoral::EncodedMultipart encoded = tricky_body("kcoral-");
  auto parts = kcoral::parse_multipart(encoded.content_type, encoded.body, {});
  REQUIRE(parts.has_value());
  for (std::size_t step : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}, std::size_t{64},
                           std::size_t{4096}, std::size_t{65536}, encoded.body.size()}) {
    CAPTURE(step);
    kcoral::MultipartDigests digests(encoded.content_type, /*record_from=*/0);
    kcoral::MultipartDigests large_only(encoded.content_type);
    feed(digests, encoded.body, step);
    feed(large_only, encoded.body, step);
    for (const kcoral::MultipartPart& part : *parts) {
      CAPTURE(part.name);
      std::size_t offset = static_cast<std::size_t>(part.data.data() - encoded.body.data());
      // By default, small parts (the program, the empty blob) are left to admission.
      CHECK((large_only.digest_of(offset, part.data.size()) != nullptr) == (part.data.size() >= kLarge));
      const std::string* digest = digests.digest_of(offset, part.data.size());
      REQUIRE(digest != nullptr);
      CHECK(*digest == kcoral::sha256_hex(part.data));
      CHECK(digests.digest_of(offset, part.data.size() + 1) == nullptr);  // only the exact range
    }
  }
}

TEST_CASE("a part whose end has not arrived has no digest yet") {
  kcoral::EncodedMultipart encoded = tricky_body("x");
  auto parts = kcoral::parse_multipart(encoded.content_type, encoded.body, {});
  REQUIRE(parts.has_value());
  const kcoral::MultipartPart& second = (*parts)[2];
  std::size_t offset = static_cast<std::size_t>(second.data.data() - encoded.body.data());
  kcoral::MultipartDigests digests(encoded.content_type);
  digests.advance(std::string_view(encoded.body).substr(0, offset + second.data.size() + 3));  // not its delimiter
  CHECK(digests.digest_of(offset, second.data.size()) == nullptr);
  digests.advance(encoded.body);
  CHECK(digests.digest_of(offset, second.data.size()) != nullptr);
}

TEST_CASE("bodies it cannot follow give no digests") {
  const std::string data(kLarge, 'd');
  kcoral::EncodedMultipart good = kcoral::encode_multipart({{"program", "application/json", data}});
  std::string boundary = good.content_type.substr(good.content_type.find('=') + 1);
  struct Case {
    std::string content_type;
    std::string body;
  };
  for (const Case& c : std::vector<Case>{
           {"application/json", good.body},                     // not multipart
           {"multipart/form-data", good.body},                  // no boundary
           {good.content_type, "preamble\r\n" + good.body},     // does not open with its delimiter
           {good.content_type, "--" + boundary + "\r\n\r\n" + data + "\r\n--" + boundary + "--"},  // no headers
           {good.content_type, "--" + boundary + "\r\n" + std::string(9000, 'h') + "\r\n\r\n" + data + "\r\n--" +
                                   boundary + "--"},  // headers past parse_multipart's limit
       }) {
    CAPTURE(c.content_type);
    kcoral::MultipartDigests digests(c.content_type);
    feed(digests, c.body, 5);
    std::size_t at = c.body.find(data);
    CHECK(digests.digest_of(at, data.size()) == nullptr);
  }
  kcoral::MultipartDigests none;
  none.advance(good.body);
  CHECK(none.digest_of(0, 0) == nullptr);
}

TEST_CASE("parse_multipart given the digests reads the same parts, taking known ends without a search") {
  kcoral::EncodedMultipart encoded = tricky_body("kcoral-");
  auto searched = kcoral::parse_multipart(encoded.content_type, encoded.body, {});
  REQUIRE(searched.has_value());
  for (std::size_t step : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, encoded.body.size()}) {
    CAPTURE(step);
    kcoral::MultipartDigests digests(encoded.content_type, /*record_from=*/0);
    feed(digests, encoded.body, step);
    auto parts = kcoral::parse_multipart(encoded.content_type, encoded.body, {}, &digests);
    REQUIRE(parts.has_value());
    REQUIRE(parts->size() == searched->size());
    for (std::size_t i = 0; i < parts->size(); ++i) {
      CHECK((*parts)[i].name == (*searched)[i].name);
      CHECK((*parts)[i].data.data() == (*searched)[i].data.data());
      CHECK((*parts)[i].data.size() == (*searched)[i].data.size());
    }
  }
  // The end comes from the digests: digests of another body, whose first part runs on past
  // a delimiter this body has in it, make the parse take that longer part (so callers give
  // only the digests of the very body parsed). A known end with no delimiter there is
  // searched for as usual.
  const std::string data(kLarge, 'd');
  kcoral::EncodedMultipart longer = kcoral::encode_multipart({{"blob:a", "application/octet-stream", data}});
  std::string boundary = longer.content_type.substr(longer.content_type.find('=') + 1);
  std::size_t start = longer.body.find(data);
  std::string cut = longer.body;
  cut.replace(start + 10, 2 + 2 + boundary.size(), "\r\n--" + boundary);
  kcoral::MultipartDigests other(longer.content_type);
  feed(other, longer.body, 4096);
  auto taken = kcoral::parse_multipart(longer.content_type, cut, {}, &other);
  REQUIRE(taken.has_value());
  CHECK(taken->front().data.size() == data.size());
  auto found = kcoral::parse_multipart(longer.content_type, cut, {});
  CHECK((!found.has_value() || found->front().data.size() == 10));
  std::string shorter = longer.body.substr(0, start) + "ddddd\r\n--" + boundary + "--\r\n";
  auto searched_again = kcoral::parse_multipart(longer.content_type, shorter, {}, &other);
  REQUIRE(searched_again.has_value());
  CHECK(searched_again->front().data.size() == 5);
}

}  // TEST_SUITE
