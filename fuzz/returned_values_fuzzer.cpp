// Fuzz target: check_returned_values (kcoral-server/front/returned_values.cpp), which
// stands between a worker's returned values and the response they are spliced into.
// Workers run the clients' code, so this text is hostile input.
//
// Input: one byte, the number of result parts, then the text. Invariants: those of
// returned_values_verdict.hpp (nlohmann agrees with the verdict); large_values_fuzzer feeds
// the same check texts of megabytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "returned_values_verdict.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  kcoral::fuzz::check_verdict(text, data[0] % 8, SIZE_MAX);
  return 0;
}
