// Fuzz target: check_returned_values (kcoral-server/front/returned_values.cpp), which
// stands between a worker's returned values and the response they are spliced into.
// Workers run the clients' code, so this text is hostile input.
//
// Input: one byte, the number of result parts, then the text. Beyond what the sanitizers
// catch (deep nesting must not exhaust the stack), it checks that accepted text is one
// JSON object, as far as a second parser (nlohmann) can tell: it must agree, except on
// numbers beyond a double's range, which it cannot hold and the check passes as text.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "invariant.hpp"
#include "returned_values.hpp"

namespace {

// Whether `text` holds a number nlohmann cannot parse: an exponent, or 20 digits in a row.
bool has_huge_number(const std::string& text) {
  std::size_t digits = 0;
  for (char c : text) {
    digits = (c >= '0' && c <= '9') ? digits + 1 : 0;
    if (digits >= 20 || c == 'e' || c == 'E') return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::size_t parts = data[0] % 8;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto checked = kcoral::check_returned_values(text, parts);
  if (!checked) {
    KCORAL_INVARIANT(checked.error().kind == kcoral::ErrorKind::engine);
    return 0;
  }
  auto tree = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  KCORAL_INVARIANT(tree.is_object() || (tree.is_discarded() && has_huge_number(text)));
  return 0;
}
