// Workspace paths (libkcoral/src/workspace_path.cpp): normalize_workspace_path's canonical
// form and refusals (.., backslash, NUL, absolute, long components and paths), and the
// collision rule between the file uploads of one program (equal paths, or one path a
// directory of another, with sorting traps such as "a" < "a-b" < "a/b").
#include <doctest/doctest.h>

#include "libkcoral/test_support.hpp"
#include "kcoral/program.hpp"

using kcoral::normalize_workspace_path;

namespace {

std::string normalized(std::string_view path) {
  auto result = normalize_workspace_path(path);
  REQUIRE_MESSAGE(result.has_value(), result.error().message);
  return *result;
}

bool refused(std::string_view path) {
  auto result = normalize_workspace_path(path);
  if (result) return false;
  CHECK(result.error().kind == kcoral::ErrorKind::parse);
  return true;
}

std::string uploads(const std::vector<std::string>& paths) {
  std::string instructions;
  for (const std::string& path : paths) {
    if (!instructions.empty()) instructions += ",";
    instructions += R"({"op":"upload","kind":"file","blob":"$A","path":")" + path + "\"}";
  }
  return kcoral::test::program_of(instructions);
}

}  // namespace

TEST_SUITE("workspace_path") {

TEST_CASE("canonical paths come back unchanged") {
  CHECK(normalized("a") == "a");
  CHECK(normalized("a/b/c.txt") == "a/b/c.txt");
  CHECK(normalized("...") == "...");
  CHECK(normalized("..a/b..") == "..a/b..");
  CHECK(normalized(".hidden") == ".hidden");
  CHECK(normalized("with space/ü") == "with space/ü");
}

TEST_CASE("dot and empty components are dropped") {
  CHECK(normalized("./a") == "a");
  CHECK(normalized("a/./b") == "a/b");
  CHECK(normalized("a//b") == "a/b");
  CHECK(normalized("a/b/") == "a/b");
  CHECK(normalized("a/b/.") == "a/b");
  CHECK(normalized("./././x//.//y/") == "x/y");
}

TEST_CASE("empty, dot-only, parent, absolute, backslash and NUL paths are refused") {
  CHECK(refused(""));
  CHECK(refused("."));
  CHECK(refused("./"));
  CHECK(refused(".//./"));
  CHECK(refused(".."));
  CHECK(refused("../a"));
  CHECK(refused("a/../b"));
  CHECK(refused("a/.."));
  CHECK(refused("/a"));
  CHECK(refused("//a"));
  CHECK(refused("a\\b"));
  CHECK(refused("..\\a"));
  CHECK(refused(std::string_view("a\0b", 3)));
  CHECK(refused(std::string_view("\0", 1)));
}

TEST_CASE("components are at most 255 bytes and the whole path at most 4096") {
  CHECK(normalized(std::string(255, 'c')) == std::string(255, 'c'));
  CHECK(refused(std::string(256, 'c')));
  CHECK(refused("a/" + std::string(256, 'c') + "/b"));
  std::string longest;
  while (longest.size() + 101 <= 4096) longest += std::string(100, 'p') + "/";
  longest += std::string(4096 - longest.size(), 'q');
  REQUIRE(longest.size() == 4096);
  CHECK(normalized(longest) == longest);
  CHECK(refused(longest + "q"));
}

TEST_CASE("distinct unrelated paths do not collide") {
  CHECK(kcoral::check_path_collisions({}).has_value());
  CHECK(kcoral::check_path_collisions({"a"}).has_value());
  CHECK(kcoral::check_path_collisions({"a/b", "a/c", "ab", "a-b", "b/a"}).has_value());
  CHECK(kcoral::check_path_collisions({"a-b/c", "a/b", "a.b"}).has_value());
  CHECK(kcoral::check_path_collisions({"ab/c", "a"}).has_value());
}

TEST_CASE("equal paths collide") {
  auto status = kcoral::check_path_collisions({"x/y", "a", "x/y"});
  REQUIRE_FALSE(status.has_value());
  CHECK(status.error().kind == kcoral::ErrorKind::parse);
}

TEST_CASE("a path that is a directory of another collides, whatever sorts between them") {
  CHECK_FALSE(kcoral::check_path_collisions({"a", "a/b"}).has_value());
  CHECK_FALSE(kcoral::check_path_collisions({"a/b", "a"}).has_value());
  CHECK_FALSE(kcoral::check_path_collisions({"a", "a/b/c/d"}).has_value());
  // Bytewise, "a-b" and "a.b" sort between "a" and "a/b" ('-' and '.' are below '/').
  CHECK_FALSE(kcoral::check_path_collisions({"a", "a-b", "a.b", "a/b"}).has_value());
  CHECK_FALSE(kcoral::check_path_collisions({"a/b", "a-b", "a"}).has_value());
  CHECK_FALSE(kcoral::check_path_collisions({"x/a", "x/a-b", "x/a!", "x/a/b"}).has_value());
  CHECK_FALSE(kcoral::check_path_collisions({"d/e", "d/e-1/f", "d/e/f"}).has_value());
}

TEST_CASE("the parser applies normalization before the collision rule") {
  CHECK(kcoral::test::parses(uploads({"a/b", "a-b", "ab"})));
  CHECK_FALSE(kcoral::test::parses(uploads({"a/b", "./a//b"})));
  CHECK_FALSE(kcoral::test::parses(uploads({"a", "a-b", "a/b"})));
  CHECK_FALSE(kcoral::test::parses(uploads({"a/b/c", "a/b/"})));
  CHECK_FALSE(kcoral::test::parses(uploads({"../x"})));
  CHECK_FALSE(kcoral::test::parses(uploads({"/etc/passwd"})));
  CHECK_FALSE(kcoral::test::parses(uploads({"a\\\\b"})));   // JSON "a\\b": one backslash
  CHECK_FALSE(kcoral::test::parses(uploads({"a\\u0000b"})));  // JSON escape of NUL
  CHECK_FALSE(kcoral::test::parses(uploads({""})));
  CHECK_FALSE(kcoral::test::parses(uploads({"."})));
  auto error = kcoral::test::parse_failure(uploads({"a", "a/b"}));
  REQUIRE(error.has_value());
  CHECK(error->message.find("directory") != std::string::npos);
}

}  // TEST_SUITE
