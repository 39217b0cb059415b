// Request ids (libkcoral/src/request_id.cpp): fresh ids are random version-4 UUIDs in
// lowercase canonical form, and only exactly that form is accepted from a client.
#include <doctest/doctest.h>

#include <set>

#include "kcoral/request_id.hpp"

TEST_SUITE("request_id") {

TEST_CASE("new request ids are canonical version-4 UUIDs, all different") {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    std::string id = kcoral::new_request_id();
    CAPTURE(id);
    REQUIRE(id.size() == 36);
    CHECK(kcoral::is_canonical_request_id(id));
    CHECK(id[8] == '-');
    CHECK(id[13] == '-');
    CHECK(id[18] == '-');
    CHECK(id[23] == '-');
    CHECK(id[14] == '4');                                      // version 4
    CHECK(std::string_view("89ab").find(id[19]) != std::string_view::npos);  // RFC 4122 variant
    CHECK(seen.insert(id).second);
  }
}

TEST_CASE("only one lowercase canonical UUID is accepted") {
  CHECK(kcoral::is_canonical_request_id("123e4567-e89b-42d3-a456-426614174000"));
  CHECK(kcoral::is_canonical_request_id("00000000-0000-0000-0000-000000000000"));
  CHECK_FALSE(kcoral::is_canonical_request_id("123E4567-E89B-42D3-A456-426614174000"));
  CHECK_FALSE(kcoral::is_canonical_request_id("{123e4567-e89b-42d3-a456-426614174000}"));
  CHECK_FALSE(kcoral::is_canonical_request_id("123e4567e89b42d3a456426614174000"));
  CHECK_FALSE(kcoral::is_canonical_request_id("123e4567-e89b-42d3-a456-42661417400"));
  CHECK_FALSE(kcoral::is_canonical_request_id("123e4567-e89b-42d3-a456-4266141740000"));
  CHECK_FALSE(kcoral::is_canonical_request_id("123e4567-e89b-42d3-a456-42661417400g"));
  CHECK_FALSE(kcoral::is_canonical_request_id("123e4567-e89b42d3--a456-426614174000"));
  CHECK_FALSE(kcoral::is_canonical_request_id(" 23e4567-e89b-42d3-a456-426614174000"));
  CHECK_FALSE(kcoral::is_canonical_request_id(""));
  CHECK_FALSE(kcoral::is_canonical_request_id("request-1"));
}

}  // TEST_SUITE
