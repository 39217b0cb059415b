// RequestBody (kcoral-server/front/request_body.cpp): the Beast body type around a
// kcoral::BlobFile, fed as a session feeds its parser.
#include <doctest/doctest.h>

#include <boost/beast/http.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kcoral/multipart.hpp"
#include "kcoral/sha256.hpp"
#include "request_body.hpp"

namespace http = boost::beast::http;

namespace {

// The /execute request that carries `encoded`, with its declared length.
std::string execute_request(const kcoral::EncodedMultipart& encoded) {
  return "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: " + encoded.content_type +
         "\r\nContent-Length: " + std::to_string(encoded.body.size()) + "\r\n\r\n" + encoded.body;
}

// An /execute request of a program part and one blob part of `blob` bytes.
std::pair<std::string, std::string> upload_request(const std::string& blob) {
  return {execute_request(kcoral::encode_multipart(
              {{"program", "application/json", "{}"}, {"blob:x", "application/octet-stream", blob}})),
          blob};
}

// Feeds `request` to `parser` as a session's reads bring it, `next_piece()` bytes at a
// time (at most what is left), until the parser is done or fails; its error, if any.
template <class NextPiece>
boost::beast::error_code feed(http::request_parser<kcoral::RequestBody>& parser, const std::string& request,
                              NextPiece next_piece) {
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  boost::beast::error_code ec;
  std::size_t used = 0;
  while (!parser.is_done() && !ec) {
    std::size_t piece = std::min<std::size_t>(next_piece(), request.size() - used);
    used += parser.put(boost::asio::buffer(request.data() + used, piece), ec);
    if (ec == http::error::need_more) ec = {};
  }
  return ec;
}

}  // namespace

TEST_CASE("a parser fills the body from a declared length and from chunks alike") {
  for (std::string request :
       {std::string("POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world"),
        std::string("POST /execute HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n\r\n")}) {
    CAPTURE(request);
    http::request_parser<kcoral::RequestBody> parser;
    boost::beast::error_code ec;
    std::size_t used = 0;
    while (!parser.is_done() && !ec) used += parser.put(boost::asio::buffer(request.data() + used, request.size() - used), ec);
    REQUIRE_FALSE(ec);
    CHECK(parser.get().body().bytes.view() == "hello world");
  }
}

TEST_CASE("a declared length is reserved whole before the body comes, and one no memory can hold is ENOMEM") {
  std::string header = "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nx";
  http::request_parser<kcoral::RequestBody> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  parser.eager(true);  // on past the header into the body's first byte
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(header), ec);
  REQUIRE((!ec || ec == http::error::need_more));
  CHECK(parser.get().body().bytes.capacity() >= 100000);
  CHECK(parser.get().body().bytes.view() == "x");

  std::string huge = "POST /execute HTTP/1.1\r\nHost: x\r\nContent-Length: 4611686018427387904\r\n\r\nx";
  http::request_parser<kcoral::RequestBody> refused;
  refused.body_limit(std::numeric_limits<std::uint64_t>::max());
  refused.eager(true);
  refused.put(boost::asio::buffer(huge), ec);
  CHECK(ec == boost::beast::error_code(ENOMEM, boost::beast::generic_category()));
}

TEST_CASE("a multipart body's parts are hashed as the parser is fed, read by read") {
  auto [request, _] = upload_request(std::string(300000, 'b'));
  http::request_parser<kcoral::RequestBody> parser;
  REQUIRE_FALSE(feed(parser, request, [] { return 4096; }));
  const kcoral::ReceivedBody& body = parser.get().body().settled();
  std::size_t at = body.bytes.view().find(std::string(300000, 'b'));
  const std::string* digest = body.digests.digest_of(at, 300000);
  REQUIRE(digest != nullptr);
  CHECK(*digest == kcoral::sha256_hex(std::string(300000, 'b')));
}

TEST_CASE("a large body is handed on without waiting for its hash, which settled() waits for") {
  std::string blob(2 * kcoral::PartHasher::kFromBytes, 'h');
  auto [request, _] = upload_request(blob);
  http::request_parser<kcoral::RequestBody> parser;
  REQUIRE_FALSE(feed(parser, request, [] { return 1 << 20; }));
  kcoral::ReceivedRequestBody& received = parser.get().body();
  // The hashing goes with the body: the session's read ended without waiting for it.
  REQUIRE(received.hashing != nullptr);
  const kcoral::ReceivedBody& body = received.settled();
  CHECK(received.hashing == nullptr);
  std::size_t at = body.bytes.view().find(blob);
  const std::string* digest = body.digests.digest_of(at, blob.size());
  REQUIRE(digest != nullptr);
  CHECK(*digest == kcoral::sha256_hex(blob));
  // A small body has no hashing to wait for.
  auto [small, _2] = upload_request("tiny");
  http::request_parser<kcoral::RequestBody> small_parser;
  REQUIRE_FALSE(feed(small_parser, small, [] { return 4096; }));
  CHECK(small_parser.get().body().hashing == nullptr);
}

TEST_CASE("a large declared body is hashed on a thread beside the reads, and its blob kept at once") {
  std::string blob(3 * kcoral::PartHasher::kFromBytes + 12345, '\0');
  for (std::size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>((i * 7919) >> 3);
  auto [request, _] = upload_request(blob);
  http::request_parser<kcoral::RequestBody> parser;
  REQUIRE_FALSE(feed(parser, request, [] { return 65536; }));
  kcoral::ReceivedBody& body = parser.get().body().settled();
  std::size_t at = body.bytes.view().find(blob);
  const std::string* digest = body.digests.digest_of(at, blob.size());
  REQUIRE(digest != nullptr);
  CHECK(*digest == kcoral::sha256_hex(blob));
  // The hashing thread's view of the file does not keep it from being sealed.
  auto kept = body.bytes.keep(std::vector<kcoral::BlobFile::Range>{{at, blob.size()}});
  REQUIRE_MESSAGE(kept.has_value(), kept.error().message);
  CHECK((*kept)[0].view() == blob);
}

TEST_CASE("a large body given up half-way stops its hashing thread, and a finished one's file outlives it") {
  auto [request, blob] = upload_request(std::string(2 * kcoral::PartHasher::kFromBytes, 'q'));
  for (int round = 0; round < 20; ++round) {
    http::request_parser<kcoral::RequestBody> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    boost::beast::error_code ec;
    parser.put(boost::asio::buffer(request.data(), request.size() / 2), ec);
    CHECK_FALSE(parser.is_done());
  }  // each parser, its body and its file gone while its thread may still be hashing
  kcoral::BlobFile file;
  REQUIRE(file.append(std::string(3 * kcoral::PartHasher::kFromBytes, 'z')));
  auto hasher = kcoral::PartHasher::start(file.fd(), file.size(), "multipart/form-data; boundary=b");
  REQUIRE(hasher != nullptr);
  hasher->written(file.size());
  kcoral::MultipartDigests digests = hasher->finish();
  hasher.reset();
  file = std::string_view("gone");  // the thread's view was its own
  CHECK(digests.digest_of(0, 1) == nullptr);  // no delimiter: nothing hashed
}

TEST_CASE("megabytes of parts with near-miss delimiters in them, fed in uneven pieces, hash as parsed") {
  // Five parts of 3 bytes to 3 MiB, whose data holds what a delimiter starts with (CRLF,
  // "--", the boundary less its last byte) at every offset class, fed as reads of uneven
  // size: the hashing thread's digest of each part is its SHA-256 as parse_multipart cuts it.
  std::mt19937 random(11);
  std::vector<std::string> blobs;
  for (std::size_t size : {3u, 70000u, 1u << 20, 3u << 20, 123457u}) {
    std::string blob(size, '\0');
    for (char& byte : blob) byte = static_cast<char>(random());
    blobs.push_back(std::move(blob));
  }
  // Framed by hand, around a boundary chosen here, so that the near misses are of it.
  const std::string boundary = "kcoral-near-miss-0123456789";
  const std::string near_miss = "\r\n--" + boundary.substr(0, boundary.size() - 1);
  for (std::string& blob : blobs)
    for (std::size_t at = 7; at + near_miss.size() < blob.size(); at += 4093) {
      blob.replace(at, near_miss.size(), near_miss);
      blob[at + near_miss.size()] = '8';  // not the boundary's last byte: a miss by one
    }
  kcoral::EncodedMultipart encoded{"multipart/form-data; boundary=" + boundary, ""};
  auto add_part = [&](const std::string& name, const std::string& type, const std::string& data) {
    encoded.body += "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\nContent-Type: " + type +
                    "\r\n\r\n" + data + "\r\n";
  };
  add_part("program", "application/json", "{}");
  for (std::size_t i = 0; i < blobs.size(); ++i) add_part("blob:" + std::to_string(i), "application/octet-stream", blobs[i]);
  encoded.body += "--" + boundary + "--\r\n";
  std::string request = execute_request(encoded);
  http::request_parser<kcoral::RequestBody> parser;
  REQUIRE_FALSE(feed(parser, request, [&] { return 1 + random() % 300000; }));
  const kcoral::ReceivedBody& body = parser.get().body().settled();
  auto parsed = kcoral::parse_multipart(encoded.content_type, body.bytes.view(), kcoral::MultipartLimits{});
  REQUIRE_MESSAGE(parsed.has_value(), parsed.error().message);
  REQUIRE(parsed->size() == blobs.size() + 1);
  for (std::size_t i = 0; i < blobs.size(); ++i) {
    const kcoral::MultipartPart& part = (*parsed)[i + 1];
    CHECK(part.data == blobs[i]);
    auto offset = static_cast<std::size_t>(part.data.data() - body.bytes.data());
    const std::string* digest = body.digests.digest_of(offset, part.data.size());
    if (part.data.size() < kcoral::MultipartDigests::kRecordedFrom) {
      CHECK(digest == nullptr);  // small parts are hashed at admission
    } else {
      REQUIRE(digest != nullptr);
      CHECK(*digest == kcoral::sha256_hex(blobs[i]));
    }
  }
}
