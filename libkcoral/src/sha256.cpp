// SHA-256 through OpenSSL's EVP interface, hex-encoded.
#include "kcoral/sha256.hpp"

#include <openssl/evp.h>

#include <array>

namespace kcoral {

std::string sha256_hex(std::span<const std::byte> data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  // EVP_Digest is a one-shot that cannot fail for SHA-256 short of memory exhaustion.
  EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * length, '0');
  for (unsigned int i = 0; i < length; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  return sha256_hex(std::as_bytes(std::span(data.data(), data.size())));
}

bool is_sha256_hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace kcoral
