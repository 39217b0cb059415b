// check_returned_values: a worker's returned values, checked before they reach a response.
//
// A worker's returned values are spliced into the response as they are, so they must be
// one JSON object whose binary nodes name each result part exactly once: otherwise a
// worker could break the response's JSON or add fields to it (a second "status", say).
// simdjson's on-demand parser validates the text without converting numbers, so integers
// of any size (Python's) pass as the client will read them; its depth limit bounds the
// walk's recursion.
#pragma once

#include <cstddef>
#include <string>

#include "kcoral/error.hpp"

namespace kcoral {

// Fails (engine) unless `results` is one JSON object whose binary nodes name each of the
// `parts` result parts ("return:N") exactly once.
[[nodiscard]] Status check_returned_values(const std::string& results, std::size_t parts);

}  // namespace kcoral
