// Fuzz target: check_returned_values on large texts (large_text.hpp): numbers and strings
// of megabytes, nesting a million deep, floods of values and parts, as a worker patched by
// its program could send them. It must judge each in one pass, without recursion (a stack
// overflow is a crash here), and the verdict must hold to returned_values_verdict.hpp's
// invariants (nlohmann's verdict compared on texts up to 64 KiB: returned_values_fuzzer
// compares every text, and nlohmann on megabytes would slow the search).
//
// Input: one byte, the number of result parts, then the recipe of the text.
#include <cstddef>
#include <cstdint>

#include "large_text.hpp"
#include "returned_values_verdict.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  kcoral::fuzz::check_verdict(kcoral::fuzz::large_text(data + 1, size - 1), data[0] % 4, std::size_t{64} << 10);
  return 0;
}
