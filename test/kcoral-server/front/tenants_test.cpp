// Tenants (kcoral-server/front/tenants.cpp): a token file's lines are `NAME TOKEN` or a
// bare token (named tenant-<line>); lines of one name are one tenant; a file of bare tokens
// (the format before names) still reads, a token per tenant; malformed lines are refused
// with their number and without the token; without a file there is one tenant, "default";
// what a tenant keeps is keyed by its name or its bare token, never by its line.
#include <doctest/doctest.h>

#include <fstream>

#include "libkcoral/temp_dir.hpp"
#include "tenants.hpp"

namespace {

kcoral::Tenants parsed(std::string_view text) {
  auto tenants = kcoral::Tenants::parse(text, "tokens");
  REQUIRE_MESSAGE(tenants.has_value(), tenants.error().message);
  return std::move(*tenants);
}

std::string refusal(std::string_view text) {
  auto tenants = kcoral::Tenants::parse(text, "tokens");
  REQUIRE_FALSE(tenants.has_value());
  return tenants.error().message;
}

}  // namespace

TEST_SUITE("tenants") {

TEST_CASE("without a token file there is one tenant, whom every request is") {
  kcoral::Tenants tenants;
  CHECK_FALSE(tenants.need_tokens());
  CHECK(tenants.size() == 1);
  CHECK(tenants.name(0) == "default");
  CHECK(tenants.find("") == 0);
  CHECK(tenants.find("anything") == 0);
}

TEST_CASE("named lines, and bare tokens named by their line") {
  auto tenants = parsed("alice  token-a\n\n  bob\ttoken-b  \r\ntoken-c\n");
  CHECK(tenants.need_tokens());
  CHECK(tenants.names() == std::vector<std::string>{"alice", "bob", "tenant-4"});
  CHECK(tenants.find("token-a") == 0);
  CHECK(tenants.find("token-b") == 1);
  CHECK(tenants.find("token-c") == 2);
  CHECK_FALSE(tenants.find("token-d").has_value());
  CHECK_FALSE(tenants.find("alice").has_value());  // a name is not a token
  CHECK_FALSE(tenants.find("alice  token-a").has_value());
  CHECK_FALSE(tenants.find("").has_value());
}

TEST_CASE("a file of bare tokens, as before names, still reads: each token a tenant of its own") {
  auto tenants = parsed("first-token\nsecond-token\n");
  CHECK(tenants.names() == std::vector<std::string>{"tenant-1", "tenant-2"});
  CHECK(tenants.find("first-token") == 0);
  CHECK(tenants.find("second-token") == 1);
}

TEST_CASE("lines of one name are one tenant's tokens (rotation)") {
  auto tenants = parsed("alice old\nbob b\nalice new\nalice new\n");
  CHECK(tenants.size() == 2);
  CHECK(tenants.find("old") == 0);
  CHECK(tenants.find("new") == 0);
  CHECK(tenants.find("b") == 1);
}

TEST_CASE("malformed lines are refused with their number, never showing a token") {
  std::string more = refusal("alice a\nbob the-token extra\n");
  CHECK(more.find("tokens, line 2") != std::string::npos);
  CHECK(more.find("the-token") == std::string::npos);
  std::string bad_name = refusal("ali/ce the-token\n");
  CHECK(bad_name.find("line 1") != std::string::npos);
  CHECK(bad_name.find("letters, digits") != std::string::npos);
  CHECK(bad_name.find("the-token") == std::string::npos);
  CHECK(refusal(std::string(65, 'n') + " t\n").find("at most 64") != std::string::npos);
  std::string shared = refusal("alice the-token\nbob the-token\n");
  CHECK(shared.find("line 2") != std::string::npos);
  CHECK(shared.find("alice's") != std::string::npos);
  CHECK(shared.find("the-token") == std::string::npos);
  CHECK(refusal("\n  \n").find("holds no token") != std::string::npos);
}

TEST_CASE("a tenant's key is its name, or its bare token's digest: never its line") {
  auto before = parsed("first-token\nsecond-token\nalice a1\nalice a2\n");
  auto after = parsed("second-token\nalice a2\n");  // the first token revoked, alice's first too
  CHECK(before.name(1) == "tenant-2");
  CHECK(after.name(0) == "tenant-1");  // shown by its line, which moved
  CHECK(after.key(0) == before.key(1));  // kept under its token, which did not
  CHECK(after.key(0) != before.key(0));
  CHECK(after.key(after.find("a2").value()) == "alice");
  CHECK(before.key(0).find("first-token") == std::string::npos);  // a digest, not the token
  CHECK(kcoral::Tenants().key(0) == "default");
}

TEST_CASE("no line names a tenant as a bare token's is named") {
  std::string taken = refusal("first-token\ntenant-1 other-token\n");
  CHECK(taken.find("line 2") != std::string::npos);
  CHECK(taken.find("bare token's") != std::string::npos);
  CHECK(taken.find("other-token") == std::string::npos);
  CHECK(refusal("tenant-7 t\n").find("bare token's") != std::string::npos);
  CHECK(parsed("tenant-a t\ntenant- u\ntenant-1x v\n").size() == 3);  // not a line's number
}

TEST_CASE("a token file is read from its path") {
  kcoral::test::TempDir dir;
  std::ofstream(dir / "tokens") << "alice a\nbob b\n";
  auto tenants = kcoral::Tenants::read_token_file(dir / "tokens");
  REQUIRE(tenants.has_value());
  CHECK(tenants->find("b") == 1);
  auto missing = kcoral::Tenants::read_token_file(dir / "none");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.find("cannot read the token file") != std::string::npos);
}

}  // TEST_SUITE
