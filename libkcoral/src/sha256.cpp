// SHA-256 through OpenSSL's EVP interface, hex-encoded.
#include "kcoral/sha256.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <system_error>
#include <new>
#include <thread>

namespace kcoral {
namespace {

std::string hex(const unsigned char* digest, unsigned int length) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * length, '0');
  for (unsigned int i = 0; i < length; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::span<const std::byte> data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  // EVP_Digest is a one-shot that cannot fail for SHA-256 short of memory exhaustion.
  EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr);
  return hex(digest.data(), length);
}

void Sha256::Free::operator()(EVP_MD_CTX* context) const { EVP_MD_CTX_free(context); }

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  if (!context_ || EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) != 1) throw std::bad_alloc();
}

void Sha256::update(std::string_view data) { EVP_DigestUpdate(context_.get(), data.data(), data.size()); }

std::string Sha256::hex_digest() {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  EVP_DigestFinal_ex(context_.get(), digest.data(), &length);
  EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr);
  return hex(digest.data(), length);
}

std::string sha256_hex(std::string_view data) {
  return sha256_hex(std::as_bytes(std::span(data.data(), data.size())));
}

std::vector<std::string> sha256_hex_each(std::span<const std::span<const std::byte>> pieces) {
  std::vector<std::string> digests(pieces.size());
  std::vector<std::size_t> large;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].size() >= kHashOnThreadsFrom)
      large.push_back(i);
    else
      digests[i] = sha256_hex(pieces[i]);
  }
  // Each hashing thread, the caller's too, takes the next large piece until none is left.
  std::atomic<std::size_t> next{0};
  auto hash_large = [&] {
    for (std::size_t k = next++; k < large.size(); k = next++) digests[large[k]] = sha256_hex(pieces[large[k]]);
  };
  std::vector<std::jthread> helpers;
  // Asked only when there is work to share: the count is read from sysfs at each call, and
  // this runs for every request the front admits, most with no large piece at all.
  std::size_t cores = large.size() > 1 ? std::max(1u, std::thread::hardware_concurrency()) : 1;
  for (std::size_t t = 1; t < std::min(large.size(), cores); ++t) {
    try {
      helpers.emplace_back(hash_large);
    } catch (const std::system_error&) {  // no more threads: those started and the caller do it
      break;
    }
  }
  hash_large();
  helpers.clear();  // joined
  return digests;
}

bool is_sha256_hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace kcoral
