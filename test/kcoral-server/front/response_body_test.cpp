// The front's response body (kcoral-server/front/response_body.hpp): the serializer gets
// it a bounded window of buffers at a time, every non-empty piece once and in order, so
// that a body of a million small parts costs each write its window, not the whole body.
#include <doctest/doctest.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <algorithm>
#include <string>

#include "kcoral/blob.hpp"
#include "response_body.hpp"

TEST_SUITE("response body") {

TEST_CASE("a body of 200,000 parts is given a bounded window at a time, all of it, in order") {
  // As the front has them: slices of one memory file, most of them empty.
  kcoral::BlobBuilder parts;
  for (int part = 0; part < 200000; ++part)
    REQUIRE(parts.append(part % 1000 == 0 ? std::string(part % 7 + 1, 'x') : std::string()));
  auto blobs = parts.finish();
  REQUIRE(blobs);
  kcoral::ResponseBody body;
  for (std::size_t part = 0; part < blobs->size(); ++part) {
    body.append("--boundary " + std::to_string(part) + "\r\n\r\n");
    body.append((*blobs)[part]);
  }
  boost::beast::http::response_header<> header;
  kcoral::ResponseBodyType::writer writer(header, body);
  boost::beast::error_code ec;
  writer.init(ec);
  REQUIRE(!ec);

  std::string given;
  std::size_t windows = 0, largest = 0, empty = 0;
  for (bool more = true; more;) {
    auto window = writer.get(ec);
    REQUIRE(!ec);
    if (!window) break;
    ++windows;
    largest = std::max(largest, window->first.size());
    for (const auto& buffer : window->first) {
      empty += buffer.size() == 0;
      given.append(static_cast<const char*>(buffer.data()), buffer.size());
    }
    more = window->second;
  }
  CHECK_FALSE(writer.get(ec).has_value());
  CHECK(given == body.joined());
  CHECK(empty == 0);  // empty pieces are left out
  CHECK(largest <= 256);
  CHECK(windows >= 200000 / 256);
}

TEST_CASE("a body of text alone is one window, and an empty body none") {
  boost::beast::http::response_header<> header;
  boost::beast::error_code ec;
  kcoral::ResponseBody text(std::string(R"({"status":"COMPLETED"})"));
  kcoral::ResponseBodyType::writer writer(header, text);
  auto window = writer.get(ec);
  REQUIRE(window.has_value());
  CHECK(window->first.size() == 1);
  CHECK(!window->second);
  CHECK_FALSE(writer.get(ec).has_value());

  kcoral::ResponseBody empty;
  kcoral::ResponseBodyType::writer none(header, empty);
  CHECK_FALSE(none.get(ec).has_value());
}

}  // TEST_SUITE
