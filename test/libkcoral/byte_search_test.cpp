// find_bytes: memmem with std::string_view::find's answers.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <string_view>

#include "byte_search.hpp"

TEST_SUITE("byte_search") {

TEST_CASE("find_bytes answers as std::string_view::find does, from every start") {
  const std::string_view npos_text = "abc";
  CHECK(kcoral::find_bytes(npos_text, "d") == std::string_view::npos);
  CHECK(kcoral::find_bytes(npos_text, "abcd") == std::string_view::npos);
  CHECK(kcoral::find_bytes(npos_text, "", 3) == 3);
  CHECK(kcoral::find_bytes(npos_text, "", 4) == std::string_view::npos);
  CHECK(kcoral::find_bytes(npos_text, "c", 7) == std::string_view::npos);
  CHECK(kcoral::find_bytes("", "") == 0);
  CHECK(kcoral::find_bytes(std::string_view(), "x") == std::string_view::npos);  // a null data()
  CHECK(kcoral::find_bytes("x", std::string_view()) == 0);
  // Random bytes of a small alphabet, with delimiters in them, overlapping ones too.
  std::mt19937 random(7);
  std::string body;
  for (int i = 0; i < 20000; ++i) body += "\r\n-ab"[random() % 5];
  body.insert(9000, "\r\n--b\r\n--b");
  for (std::string_view needle : {"\r\n--b", "\r\n", "-", "b\r\n--b\r", "\r\n--b\r\n--b\r\n"})
    for (std::size_t from = 0; from <= body.size() + 1; from += 97)
      CHECK(kcoral::find_bytes(body, needle, from) == std::string_view(body).find(needle, from));
}

TEST_CASE("find_bytes over megabytes of random bytes full of near misses agrees with string_view::find") {
  std::mt19937 random(13);
  std::string body(8 << 20, '\0');
  for (char& byte : body) byte = static_cast<char>(random());
  const std::string needle = "\r\n--kcoral-0123456789abcdef0123456789abcdef";
  for (std::size_t at = 5; at + needle.size() < body.size(); at += 65521)  // all but its last byte
    body.replace(at, needle.size() - 1, needle.substr(0, needle.size() - 1));
  body.replace(body.size() - 1000, needle.size(), needle);
  for (std::size_t from : {std::size_t{0}, std::size_t{1} << 20, body.size() - 1000, body.size() - 999})
    CHECK(kcoral::find_bytes(body, needle, from) == std::string_view(body).find(needle, from));
}

}  // TEST_SUITE
