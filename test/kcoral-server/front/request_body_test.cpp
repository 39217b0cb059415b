// RequestBody (kcoral-server/front/request_body.cpp): bytes that grow by mremap, never by a
// copy, and the Beast body type around them, fed as a session feeds its parser.
#include <doctest/doctest.h>

#include <boost/beast/http.hpp>
#include <string>

#include "request_body.hpp"

namespace http = boost::beast::http;
using kcoral::MappedBytes;

TEST_CASE("bytes appended in many steps come back whole, growing by doubling") {
  MappedBytes bytes;
  CHECK(bytes.view().empty());
  std::string expected;
  for (int i = 0; i < 20000; ++i) {
    std::string step = std::to_string(i) + std::string(static_cast<std::size_t>(i % 97), 'a' + i % 26);
    REQUIRE(bytes.append(step));
    expected += step;
  }
  CHECK(bytes.view() == expected);
  CHECK(bytes.capacity() >= bytes.size());
  CHECK(bytes.capacity() < 4 * bytes.size());
  MappedBytes moved = std::move(bytes);
  CHECK(moved.view() == expected);
  CHECK(bytes.size() == 0);  // NOLINT: moved-from is empty, by contract
  moved = std::string_view("replaced");
  CHECK(moved.view() == "replaced");
}

TEST_CASE("a reservation is exact to the page, and an impossible one fails without harm") {
  MappedBytes bytes;
  REQUIRE(bytes.reserve(10000));
  CHECK(bytes.capacity() == 12288);
  REQUIRE(bytes.append("kept"));
  CHECK_FALSE(bytes.reserve(std::size_t{1} << 62));
  CHECK(bytes.view() == "kept");
}

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
    CHECK(parser.get().body().view() == "hello world");
    std::string_view seen = parser.get().body();  // as the router reads it
    CHECK(seen == "hello world");
  }
}
