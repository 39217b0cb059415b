// SHA-256 digests as the protocol writes them: 64 lowercase hex digits.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

typedef struct evp_md_ctx_st EVP_MD_CTX;  // OpenSSL's own declaration, without its headers

namespace kcoral {

// SHA-256 of bytes given piece by piece, as they come. Move-only.
class Sha256 {
 public:
  Sha256();  // throws std::bad_alloc when OpenSSL has no memory for its state
  void update(std::string_view data);
  // The digest of everything given since construction or the last digest; starts over.
  [[nodiscard]] std::string hex_digest();

 private:
  struct Free {
    void operator()(EVP_MD_CTX* context) const;
  };
  std::unique_ptr<EVP_MD_CTX, Free> context_;
};

// Computed by OpenSSL.
[[nodiscard]] std::string sha256_hex(std::span<const std::byte> data);
[[nodiscard]] std::string sha256_hex(std::string_view data);
// The digests of `pieces`, in order. Pieces of at least kHashOnThreadsFrom bytes are hashed
// on threads beside the caller's, as many at once as the machine has cores, so several
// large blobs take about the time of the largest rather than of all of them; with no
// thread to be had, the caller hashes them all.
[[nodiscard]] std::vector<std::string> sha256_hex_each(std::span<const std::span<const std::byte>> pieces);
inline constexpr std::size_t kHashOnThreadsFrom = std::size_t{1} << 20;
// Whether `text` has the form of a digest (64 lowercase hex digits).
[[nodiscard]] bool is_sha256_hex(std::string_view text);

}  // namespace kcoral
