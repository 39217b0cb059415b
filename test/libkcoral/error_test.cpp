// Error kinds (libkcoral/src/error.cpp): the one table that maps every kind to its wire
// string and HTTP status. The tests walk kAllErrorKinds, so a kind added to the enum but
// not to the table (or to the list) fails here, and pin the statuses docs/protocol.md fixes.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "kcoral/error.hpp"

using kcoral::ErrorKind;

TEST_SUITE("error") {

TEST_CASE("kAllErrorKinds lists every enum value once, in declaration order") {
  constexpr auto count = std::size(kcoral::kAllErrorKinds);
  CHECK(count == static_cast<std::size_t>(ErrorKind::unauthorized) + 1);
  for (std::size_t i = 0; i < count; ++i)
    CHECK(static_cast<std::size_t>(kcoral::kAllErrorKinds[i]) == i);
}

TEST_CASE("every kind has a distinct wire string that parses back to the kind") {
  std::set<std::string> seen;
  for (ErrorKind kind : kcoral::kAllErrorKinds) {
    std::string wire(kcoral::to_wire(kind));
    CAPTURE(wire);
    CHECK_FALSE(wire.empty());
    CHECK(seen.insert(wire).second);
    auto back = kcoral::error_kind_from_wire(wire);
    REQUIRE(back.has_value());
    CHECK(*back == kind);
  }
}

TEST_CASE("wire strings are the protocol's snake_case names") {
  CHECK(kcoral::to_wire(ErrorKind::parse) == "parse");
  CHECK(kcoral::to_wire(ErrorKind::compile) == "compile");
  CHECK(kcoral::to_wire(ErrorKind::runtime) == "runtime");
  CHECK(kcoral::to_wire(ErrorKind::gpu_access) == "gpu_access");
  CHECK(kcoral::to_wire(ErrorKind::correctness) == "correctness");
  CHECK(kcoral::to_wire(ErrorKind::serialization) == "serialization");
  CHECK(kcoral::to_wire(ErrorKind::unavailable) == "unavailable");
  CHECK(kcoral::to_wire(ErrorKind::engine) == "engine");
  CHECK(kcoral::to_wire(ErrorKind::request_too_large) == "request_too_large");
  CHECK(kcoral::to_wire(ErrorKind::busy) == "busy");
  CHECK(kcoral::to_wire(ErrorKind::timeout) == "timeout");
  CHECK(kcoral::to_wire(ErrorKind::response_too_large) == "response_too_large");
  CHECK(kcoral::to_wire(ErrorKind::not_found) == "not_found");
  CHECK(kcoral::to_wire(ErrorKind::method_not_allowed) == "method_not_allowed");
  CHECK(kcoral::to_wire(ErrorKind::unauthorized) == "unauthorized");
}

TEST_CASE("unknown, empty and differently cased wire strings are not kinds") {
  CHECK_FALSE(kcoral::error_kind_from_wire("").has_value());
  CHECK_FALSE(kcoral::error_kind_from_wire("PARSE").has_value());
  CHECK_FALSE(kcoral::error_kind_from_wire("parse ").has_value());
  CHECK_FALSE(kcoral::error_kind_from_wire("gpu-access").has_value());
  CHECK_FALSE(kcoral::error_kind_from_wire("ERROR").has_value());
}

TEST_CASE("every kind has the HTTP status docs/protocol.md gives it outside a program") {
  for (ErrorKind kind : kcoral::kAllErrorKinds) {
    CAPTURE(kcoral::to_wire(kind));
    int expected = 500;  // engine, response_too_large, and program kinds the server cannot attribute
    switch (kind) {
      case ErrorKind::parse: expected = 400; break;
      case ErrorKind::request_too_large: expected = 413; break;
      case ErrorKind::busy: expected = 503; break;
      case ErrorKind::timeout: expected = 504; break;
      case ErrorKind::not_found: expected = 404; break;
      case ErrorKind::method_not_allowed: expected = 405; break;
      case ErrorKind::unauthorized: expected = 401; break;
      default: break;
    }
    CHECK(kcoral::http_status(kind) == expected);
  }
}

TEST_CASE("program kinds are exactly the eight a FAILED program may carry") {
  const std::set<ErrorKind> program_kinds{
      ErrorKind::parse,         ErrorKind::compile,     ErrorKind::runtime,
      ErrorKind::gpu_access,    ErrorKind::correctness, ErrorKind::serialization,
      ErrorKind::unavailable,   ErrorKind::engine};
  for (ErrorKind kind : kcoral::kAllErrorKinds) {
    CAPTURE(kcoral::to_wire(kind));
    CHECK(kcoral::is_program_kind(kind) == program_kinds.contains(kind));
  }
}

TEST_CASE("fail() makes an unexpected Error with the given kind and message") {
  kcoral::Result<int> result = kcoral::fail(ErrorKind::busy, "later");
  REQUIRE_FALSE(result.has_value());
  CHECK(result.error().kind == ErrorKind::busy);
  CHECK(result.error().message == "later");
  kcoral::Status ok;
  CHECK(ok.has_value());
  CHECK(kcoral::Error{}.kind == ErrorKind::engine);
}

}  // TEST_SUITE
