// check_returned_values: a worker's returned values, checked before they reach a response.
//
// A worker's returned values are spliced into the response as they are, so they must be
// one JSON object whose binary nodes name each result part exactly once: otherwise a
// worker could break the response's JSON or add fields to it (a second "status", say).
// A worker runs strangers' code, which can patch anything in its process, so this text is
// written by an attacker: the check runs in one pass, in time linear in the text and in
// memory of one bit per level of nesting, without recursion or backtracking, however long
// its numbers and strings or deep its nesting.
//
//   if (auto checked = check_returned_values(text, parts); !checked) refuse(checked.error());
#pragma once

#include <cstddef>
#include <expected>
#include <string>
#include <string_view>

#include "kcoral/error.hpp"

namespace kcoral {

// How deep returned values may nest: containers in containers, the returned value itself
// at level 0. The worker's encoder refuses deeper values itself (a `serialization` error of
// their return); a text nested deeper than such values can be is refused here as well.
inline constexpr std::size_t kMaxReturnedValueDepth = 256;
// The JSON nesting of the deepest returned values: the results object, then two levels per
// value level (a node object and its array or object of children).
inline constexpr std::size_t kMaxReturnedJsonDepth = 2 * kMaxReturnedValueDepth + 3;

struct ReturnedValuesRefusal {
  // engine: not one JSON object whose binary nodes name each part once (a broken worker);
  // serialization: nested deeper than kMaxReturnedJsonDepth.
  Error error;
  std::string key;  // the top-level key (a return's key) being read then; empty before one
};

// Passes when `results` is one JSON object (RFC 8259, numbers of any length, no lone
// surrogates) nested at most kMaxReturnedJsonDepth levels, whose binary nodes name each of
// the `parts` result parts ("return:N") exactly once: a "part" field with a string value.
[[nodiscard]] std::expected<void, ReturnedValuesRefusal> check_returned_values(std::string_view results,
                                                                             std::size_t parts);

}  // namespace kcoral
