// SHA-256 digests (libkcoral/src/sha256.cpp): known test vectors in lowercase hex, the
// byte-span and string overloads agreeing, and the digest-form check used on the wire.
#include <doctest/doctest.h>

#include <span>
#include <string>
#include <vector>

#include "kcoral/sha256.hpp"

TEST_SUITE("sha256") {

TEST_CASE("digests match the FIPS 180-2 test vectors") {
  CHECK(kcoral::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(kcoral::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(kcoral::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(kcoral::sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("the byte and string overloads agree, NUL bytes included") {
  const std::string text("a\0b\xff", 4);
  auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  CHECK(kcoral::sha256_hex(bytes) == kcoral::sha256_hex(text));
  CHECK(kcoral::sha256_hex(text) != kcoral::sha256_hex(std::string_view("a")));
}

TEST_CASE("sha256_hex_each gives each piece's digest in order, large pieces hashed on threads") {
  // Large pieces go to threads (as many as the cores), small ones stay with the caller;
  // their order in the answer is the pieces' order either way.
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < 7; ++i)
    texts.push_back(std::string(i % 2 == 0 ? kcoral::kHashOnThreadsFrom + i : i * 100, static_cast<char>('a' + i)));
  std::vector<std::span<const std::byte>> pieces;
  for (const std::string& text : texts) pieces.push_back(std::as_bytes(std::span(text)));
  std::vector<std::string> digests = kcoral::sha256_hex_each(pieces);
  REQUIRE(digests.size() == texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) CHECK(digests[i] == kcoral::sha256_hex(texts[i]));
  CHECK(kcoral::sha256_hex_each({}).empty());
}

TEST_CASE("sha256_hex_each with one large piece, or none, hashes each on the caller's thread, in order") {
  // The paths that ask for no core count: one large piece has no one to share it with.
  const std::string large(kcoral::kHashOnThreadsFrom + 1, 'L');
  const std::string small_a(10, 'a'), small_b(4096, 'b');
  std::vector<std::span<const std::byte>> one_large{std::as_bytes(std::span(small_a)), std::as_bytes(std::span(large)),
                                                    std::as_bytes(std::span(small_b))};
  std::vector<std::string> digests = kcoral::sha256_hex_each(one_large);
  REQUIRE(digests.size() == 3);
  CHECK(digests[0] == kcoral::sha256_hex(small_a));
  CHECK(digests[1] == kcoral::sha256_hex(large));
  CHECK(digests[2] == kcoral::sha256_hex(small_b));
  std::vector<std::span<const std::byte>> only_small{std::as_bytes(std::span(small_b)),
                                                     std::as_bytes(std::span(small_a))};
  CHECK(kcoral::sha256_hex_each(only_small) ==
        std::vector<std::string>{kcoral::sha256_hex(small_b), kcoral::sha256_hex(small_a)});
}

TEST_CASE("digests are 64 lowercase hex digits") {
  const std::string digest = kcoral::sha256_hex("anything");
  CHECK(digest.size() == 64);
  CHECK(kcoral::is_sha256_hex(digest));
}

TEST_CASE("is_sha256_hex accepts only 64 lowercase hex digits") {
  CHECK(kcoral::is_sha256_hex(std::string(64, '0')));
  CHECK(kcoral::is_sha256_hex("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
  CHECK_FALSE(kcoral::is_sha256_hex(""));
  CHECK_FALSE(kcoral::is_sha256_hex(std::string(63, 'a')));
  CHECK_FALSE(kcoral::is_sha256_hex(std::string(65, 'a')));
  CHECK_FALSE(kcoral::is_sha256_hex(std::string(64, 'A')));
  CHECK_FALSE(kcoral::is_sha256_hex(std::string(63, 'a') + "g"));
  CHECK_FALSE(kcoral::is_sha256_hex(std::string(63, 'a') + " "));
  CHECK_FALSE(kcoral::is_sha256_hex(std::string(63, 'a') + std::string(1, '\0')));
}

}  // TEST_SUITE
