// The invariants of a returned-values verdict, shared by the fuzz targets that feed
// check_returned_values small inputs and large ones.
//
// nlohmann, a second and independent parser, judges the same text where it can: text the
// check accepts must be one JSON object for it too (but for numbers beyond a double, which
// nlohmann refuses and the check must pass), and text the check refuses as malformed must
// be refused by nlohmann as well (where it can tell: it reads a NUL byte as the end of the
// text). Nesting past the limit is the one refusal nlohmann does
// not share, and must come as `serialization`; every other refusal is `engine`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "invariant.hpp"
#include "returned_values.hpp"

namespace kcoral::fuzz {

// Whether `text` holds a number nlohmann cannot parse: an exponent, or 20 digits in a row.
inline bool has_huge_number(std::string_view text) {
  std::size_t digits = 0;
  for (char c : text) {
    digits = (c >= '0' && c <= '9') ? digits + 1 : 0;
    if (digits >= 20 || c == 'e' || c == 'E') return true;
  }
  return false;
}

// Checks `text` with `parts` result parts, and holds the verdict to nlohmann's when the
// text is at most `compare_up_to` bytes long.
inline void check_verdict(std::string_view text, std::size_t parts, std::size_t compare_up_to) {
  auto checked = check_returned_values(text, parts);
  if (!checked) {
    ErrorKind kind = checked.error().error.kind;
    KCORAL_INVARIANT(kind == ErrorKind::engine || kind == ErrorKind::serialization);
    const std::string& message = checked.error().error.message;
    bool malformed = message.starts_with("a result whose returned values are not");
    // nlohmann reads a NUL byte as the end of its input, so it cannot judge text with one.
    if (malformed && text.size() <= compare_up_to && text.find('\0') == std::string_view::npos) {
      auto tree = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      KCORAL_INVARIANT(!tree.is_object());
    }
    return;
  }
  if (text.size() > compare_up_to) return;
  auto tree = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  KCORAL_INVARIANT(tree.is_object() || (tree.is_discarded() && has_huge_number(text)));
}

}  // namespace kcoral::fuzz
