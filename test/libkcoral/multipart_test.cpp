// multipart/form-data framing (libkcoral/src/multipart.cpp): strict parsing (boundary from
// a plain or quoted parameter, CRLF framing, one Content-Disposition with one name and one
// Content-Type per part, no preamble, no trailing garbage, bounded part headers and part
// count), binary payloads that contain near-boundaries, media_type, and encode -> parse.
#include <doctest/doctest.h>

#include <random>
#include <set>
#include <string>

#include "kcoral/multipart.hpp"

using kcoral::parse_multipart;

namespace {

constexpr std::string_view kType = "multipart/form-data; boundary=XyZ";

std::string part(std::string_view name, std::string_view type, std::string_view data,
                 std::string_view boundary = "XyZ") {
  return "--" + std::string(boundary) + "\r\nContent-Disposition: form-data; name=\"" + std::string(name) +
         "\"\r\nContent-Type: " + std::string(type) + "\r\n\r\n" + std::string(data) + "\r\n";
}

std::string closing(std::string_view boundary = "XyZ") { return "--" + std::string(boundary) + "--\r\n"; }

// A body with one part whose header block (between the boundary line and the blank line)
// is `headers` verbatim.
std::string with_headers(std::string_view headers, std::string_view data = "x") {
  return "--XyZ\r\n" + std::string(headers) + "\r\n\r\n" + std::string(data) + "\r\n" + closing();
}

bool rejected(std::string_view content_type, std::string_view body, const kcoral::MultipartLimits& limits = {}) {
  auto parts = parse_multipart(content_type, body, limits);
  if (parts) return false;
  CHECK(parts.error().kind == kcoral::ErrorKind::parse);
  return true;
}

}  // namespace

TEST_SUITE("multipart") {

TEST_CASE("a well-formed body yields its parts in order, as views into the body") {
  const std::string body = part("program", "application/json", R"({"a":1})") +
                           part("blob:x", "Application/Octet-Stream; x=1", std::string("\0\x01\xff", 3)) +
                           part("empty", "text/plain", "") + closing();
  auto parts = parse_multipart(kType, body, {});
  REQUIRE_MESSAGE(parts.has_value(), parts.error().message);
  REQUIRE(parts->size() == 3);
  CHECK((*parts)[0].name == "program");
  CHECK((*parts)[0].content_type == "application/json");
  CHECK((*parts)[0].data == R"({"a":1})");
  CHECK((*parts)[1].name == "blob:x");
  CHECK((*parts)[1].content_type == "application/octet-stream");
  CHECK((*parts)[1].data == std::string_view("\0\x01\xff", 3));
  CHECK((*parts)[2].data.empty());
  CHECK((*parts)[0].data.data() >= body.data());
  CHECK((*parts)[0].data.data() < body.data() + body.size());
}

TEST_CASE("the boundary may be quoted, and type and parameter names are case-insensitive") {
  const std::string body = part("a", "text/plain", "1", "b c=\"d") + closing("b c=\"d");
  auto quoted = parse_multipart(R"(Multipart/Form-Data; charset=utf-8; Boundary="b c=\"d")", body, {});
  REQUIRE_MESSAGE(quoted.has_value(), quoted.error().message);
  CHECK((*quoted)[0].data == "1");
  CHECK(parse_multipart("multipart/form-data;boundary=XyZ", part("a", "t/t", "1") + closing(), {}).has_value());
}

TEST_CASE("a request that is not multipart/form-data, or has no usable boundary, is rejected") {
  const std::string body = part("a", "text/plain", "1") + closing();
  CHECK(rejected("application/json", body));
  CHECK(rejected("multipart/mixed; boundary=XyZ", body));
  CHECK(rejected("multipart/form-data", body));
  CHECK(rejected("multipart/form-data; boundary=", body));
  CHECK(rejected("multipart/form-data; boundary=\"\"", body));
  CHECK(rejected("multipart/form-data; boundary=\"XyZ", body));
  CHECK(rejected("multipart/form-data; boundary", body));
  CHECK(rejected("multipart/form-data; boundary=" + std::string(201, 'b'), body));
  CHECK(rejected("", body));
  // A different boundary than the body uses.
  CHECK(rejected("multipart/form-data; boundary=Other", body));
}

TEST_CASE("the body must start with its boundary and end with the closing one") {
  const std::string body = part("a", "text/plain", "1") + closing();
  CHECK(rejected(kType, "preamble\r\n" + body));
  CHECK(rejected(kType, "\r\n" + body));
  CHECK(rejected(kType, part("a", "text/plain", "1")));
  CHECK(rejected(kType, part("a", "text/plain", "1") + "--XyZ"));
  CHECK(rejected(kType, ""));
  CHECK(rejected(kType, "--XyZ"));
}

TEST_CASE("nothing but an optional CRLF may follow the closing boundary") {
  const std::string parts = part("a", "text/plain", "1");
  CHECK(parse_multipart(kType, parts + "--XyZ--", {}).has_value());
  CHECK(parse_multipart(kType, parts + "--XyZ--\r\n", {}).has_value());
  CHECK(rejected(kType, parts + "--XyZ--\r\nepilogue"));
  CHECK(rejected(kType, parts + "--XyZ--\r\n\r\n"));
  CHECK(rejected(kType, parts + "--XyZ-- "));
  CHECK(rejected(kType, parts + "--XyZ--\r\n--XyZ--\r\n"));
}

TEST_CASE("a boundary line must end with CRLF") {
  CHECK(rejected(kType, "--XyZ \r\nContent-Disposition: form-data; name=\"a\"\r\nContent-Type: t/t\r\n\r\nx\r\n" + closing()));
  CHECK(rejected(kType, "--XyZ\nContent-Disposition: form-data; name=\"a\"\nContent-Type: t/t\n\nx\n--XyZ--"));
}

TEST_CASE("a body with no parts is rejected") {
  CHECK(rejected(kType, closing()));
  CHECK(rejected(kType, "--XyZ--"));
}

TEST_CASE("each part needs exactly one form-data Content-Disposition with one non-empty name") {
  CHECK(rejected(kType, with_headers("Content-Type: text/plain")));
  CHECK(rejected(kType, with_headers("Content-Disposition: form-data; name=\"a\"\r\n"
                                     "Content-Disposition: form-data; name=\"a\"\r\nContent-Type: t/t")));
  CHECK(rejected(kType, with_headers("Content-Disposition: attachment; name=\"a\"\r\nContent-Type: t/t")));
  CHECK(rejected(kType, with_headers("Content-Disposition: form-data\r\nContent-Type: t/t")));
  CHECK(rejected(kType, with_headers("Content-Disposition: form-data; name=\"\"\r\nContent-Type: t/t")));
  CHECK(rejected(kType, with_headers("Content-Disposition: form-data; name=a; name=b\r\nContent-Type: t/t")));
  CHECK(rejected(kType, with_headers("Content-Disposition: form-data; filename=\"a\"\r\nContent-Type: t/t")));
  CHECK(rejected(kType, with_headers("Content-Disposition: form-data; name=\"a\r\nContent-Type: t/t")));
  auto ok = parse_multipart(kType, with_headers("content-disposition:form-data;NAME=\"a\\\"b;c\";filename=f\r\n"
                                                "CONTENT-TYPE:  Text/Plain ; charset=x"), {});
  REQUIRE_MESSAGE(ok.has_value(), ok.error().message);
  CHECK((*ok)[0].name == "a\"b;c");
  CHECK((*ok)[0].content_type == "text/plain");
}

TEST_CASE("each part needs exactly one Content-Type") {
  CHECK(rejected(kType, with_headers("Content-Disposition: form-data; name=\"a\"")));
  CHECK(rejected(kType, with_headers("Content-Disposition: form-data; name=\"a\"\r\n"
                                     "Content-Type: t/t\r\nContent-Type: t/t")));
}

TEST_CASE("malformed header lines, folded lines and encoded parts are rejected") {
  const std::string disposition = "Content-Disposition: form-data; name=\"a\"\r\nContent-Type: t/t";
  CHECK(rejected(kType, with_headers(disposition + "\r\nno colon here")));
  CHECK(rejected(kType, with_headers(disposition + "\r\n: empty name")));
  CHECK(rejected(kType, with_headers(disposition + "\r\n folded: continuation")));
  CHECK(rejected(kType, with_headers(disposition + "\r\nContent-Transfer-Encoding: base64")));
  CHECK(rejected(kType, with_headers(disposition + "\r\nContent-Transfer-Encoding: quoted-printable")));
  CHECK(parse_multipart(kType, with_headers(disposition + "\r\nContent-Transfer-Encoding: BINARY"), {}).has_value());
  CHECK(parse_multipart(kType, with_headers(disposition + "\r\nX-Other: ignored"), {}).has_value());
  // A part with no header block at all.
  CHECK(rejected(kType, "--XyZ\r\n\r\nx\r\n" + closing()));
}

TEST_CASE("part headers are bounded by max_part_header_bytes") {
  const std::string base = "Content-Disposition: form-data; name=\"a\"\r\nContent-Type: t/t\r\nX-Pad: ";
  kcoral::MultipartLimits limits;
  limits.max_part_header_bytes = 200;
  const std::string exact = base + std::string(200 - base.size(), 'p');
  REQUIRE(exact.size() == 200);
  CHECK(parse_multipart(kType, with_headers(exact), limits).has_value());
  CHECK(rejected(kType, with_headers(exact + "p"), limits));
  CHECK(rejected(kType, "--XyZ\r\n" + base + std::string(100000, 'p') + "\r\n\r\nx\r\n" + closing()));
  // Headers that never end.
  CHECK(rejected(kType, "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\nContent-Type: t/t\r\n"));
}

TEST_CASE("the number of parts is bounded by max_parts") {
  kcoral::MultipartLimits limits;
  limits.max_parts = 2;
  const std::string two = part("a", "t/t", "1") + part("b", "t/t", "2");
  CHECK(parse_multipart(kType, two + closing(), limits).has_value());
  CHECK(rejected(kType, two + part("c", "t/t", "3") + closing(), limits));
}

TEST_CASE("binary data may hold partial boundaries, CRLFs, dashes and NUL bytes") {
  const std::string tricky = std::string("\r\n--XyY\r\n--Xy\0--XyZ--\r\n-", 24) + "\r\n--\r\n\r\n--xyz\r\n";
  auto parts = parse_multipart(kType, part("a", "t/t", tricky) + part("b", "t/t", "\r\n") + closing(), {});
  REQUIRE_MESSAGE(parts.has_value(), parts.error().message);
  REQUIRE(parts->size() == 2);
  CHECK((*parts)[0].data == tricky);
  CHECK((*parts)[1].data == "\r\n");
}

TEST_CASE("a part's data ends at the first CRLF followed by the delimiter") {
  // A sender that lets the boundary occur in its data gets its data cut there.
  auto parts = parse_multipart(kType, part("a", "t/t", "before\r\n--XyZ\r\nContent-Disposition: form-data; name=\"b\"\r\nContent-Type: t/t\r\n\r\nafter") + closing(), {});
  REQUIRE(parts.has_value());
  REQUIRE(parts->size() == 2);
  CHECK((*parts)[0].data == "before");
  CHECK((*parts)[1].data == "after");
}

TEST_CASE("encode_multipart output parses back to the same parts") {
  std::mt19937 random(7);
  std::string noise(5000, '\0');
  for (char& c : noise) c = static_cast<char>(random());
  const std::string near_boundaries = "\r\n--kcoral-\r\n--kcoral-0123\r\n--";
  std::vector<kcoral::OutgoingPart> parts{{"result", "application/json", R"({"k":1})"},
                                          {"return:0", "application/octet-stream", noise},
                                          {"return:1", "application/octet-stream", near_boundaries},
                                          {"return:2", "application/octet-stream", ""}};
  auto encoded = kcoral::encode_multipart(parts);
  CHECK(encoded.content_type.rfind("multipart/form-data; boundary=", 0) == 0);
  auto parsed = parse_multipart(encoded.content_type, encoded.body, {});
  REQUIRE_MESSAGE(parsed.has_value(), parsed.error().message);
  REQUIRE(parsed->size() == parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    CAPTURE(i);
    CHECK((*parsed)[i].name == parts[i].name);
    CHECK((*parsed)[i].content_type == parts[i].content_type);
    CHECK((*parsed)[i].data == parts[i].data);
  }
}

TEST_CASE("encode_multipart picks a boundary that occurs in no part") {
  auto first = kcoral::encode_multipart({{"a", "t/t", "x"}});
  const std::string boundary = first.content_type.substr(first.content_type.find('=') + 1);
  CHECK_FALSE(boundary.empty());
  // Put the boundary the encoder would pick into the data: each call draws a fresh one.
  auto second = kcoral::encode_multipart({{"a", "t/t", "x"}});
  CHECK(second.content_type != first.content_type);
  std::string data = "start " + boundary + " end";
  auto third = kcoral::encode_multipart({{"a", "t/t", data}});
  const std::string boundary3 = third.content_type.substr(third.content_type.find('=') + 1);
  CHECK(data.find(boundary3) == std::string::npos);
  auto parsed = parse_multipart(third.content_type, third.body, {});
  REQUIRE(parsed.has_value());
  CHECK((*parsed)[0].data == data);
}

TEST_CASE("media_type lowercases the type and drops parameters and spaces") {
  CHECK(kcoral::media_type("Application/JSON; charset=utf-8") == "application/json");
  CHECK(kcoral::media_type("  text/plain  ") == "text/plain");
  CHECK(kcoral::media_type("application/octet-stream") == "application/octet-stream");
  CHECK(kcoral::media_type("") == "");
  CHECK(kcoral::media_type(";x=y") == "");
}

}  // TEST_SUITE

TEST_CASE("a boundary is 128 bits of hex, drawn afresh for each body") {
  std::set<std::string> boundaries;
  for (int i = 0; i < 64; ++i) {
    auto encoded = kcoral::encode_multipart({{"a", "t/t", "x"}});
    std::string boundary = encoded.content_type.substr(encoded.content_type.find('=') + 1);
    REQUIRE(boundary.size() == 7 + 32);
    CHECK(boundary.rfind("kcoral-", 0) == 0);
    CHECK(boundary.find_first_not_of("0123456789abcdef", 7) == std::string::npos);
    boundaries.insert(boundary);
  }
  CHECK(boundaries.size() == 64);
}

TEST_CASE("a part of megabytes is framed as any other and parses back") {
  std::string large(3 << 20, 'z');
  large.replace(1 << 20, 9, "\r\n--kcor");  // partial delimiters are only data
  auto encoded = kcoral::encode_multipart({{"result", "application/json", "{}"}, {"return:0", "x/y", large}});
  auto parsed = parse_multipart(encoded.content_type, encoded.body, {});
  REQUIRE(parsed.has_value());
  REQUIRE(parsed->size() == 2);
  CHECK((*parsed)[1].data == large);
}
