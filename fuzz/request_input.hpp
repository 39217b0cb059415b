// The input layout of the fuzz targets that read an HTTP request body: the Content-Type
// header's value, a newline, then the body. fuzz/make_seeds.py writes its seeds so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kcoral::fuzz {

struct RequestInput {
  std::string_view content_type;
  std::string_view body;
};

// Everything is the content type when there is no newline.
inline RequestInput split_request_input(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t newline = input.find('\n');
  if (newline == std::string_view::npos) return {input, {}};
  return {input.substr(0, newline), input.substr(newline + 1)};
}

}  // namespace kcoral::fuzz
