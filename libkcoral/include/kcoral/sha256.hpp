// SHA-256 digests as the protocol writes them: 64 lowercase hex digits.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace kcoral {

// Computed by OpenSSL.
[[nodiscard]] std::string sha256_hex(std::span<const std::byte> data);
[[nodiscard]] std::string sha256_hex(std::string_view data);
// Whether `text` has the form of a digest (64 lowercase hex digits).
[[nodiscard]] bool is_sha256_hex(std::string_view text);

}  // namespace kcoral
