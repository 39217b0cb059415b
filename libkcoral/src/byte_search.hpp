// find_bytes: where a delimiter first occurs in a large binary body.
#pragma once

#include <string.h>  // memmem (GNU)

#include <cstddef>
#include <string_view>

namespace kcoral {

// Where `needle` first occurs in `haystack` at or after `from`; npos where it does not.
// glibc's memmem, not std::string_view::find: that one looks for the needle's first byte
// with memchr and compares at each, and in random bytes a multipart delimiter's first byte
// comes every 256 bytes (64 MiB searched: 3.5 ms against 5.2).
[[nodiscard]] inline std::size_t find_bytes(std::string_view haystack, std::string_view needle,
                                            std::size_t from = 0) {
  if (from > haystack.size()) return std::string_view::npos;
  if (needle.empty()) return from;
  // Also where nothing is left to search: memmem must not be given a null pointer, as an
  // empty view's may be.
  if (haystack.size() - from < needle.size()) return std::string_view::npos;
  const void* found = ::memmem(haystack.data() + from, haystack.size() - from, needle.data(), needle.size());
  return found == nullptr ? std::string_view::npos
                          : static_cast<std::size_t>(static_cast<const char*>(found) - haystack.data());
}

}  // namespace kcoral
