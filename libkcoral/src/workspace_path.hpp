// Collision rule between the file uploads of one program (private to libkcoral; the path
// normalization itself is public in program.hpp).
#pragma once

#include <string_view>
#include <vector>

#include "kcoral/program.hpp"

namespace kcoral {

// Fails when two canonical paths are equal or one is a directory of the other.
[[nodiscard]] Status check_path_collisions(std::vector<std::string_view> paths);

}  // namespace kcoral
