// kcoral's version, from git tags (cmake/version.cmake): "X.Y.Z" on a tag, else
// "X.Y.Z.devN+gHASH" (N commits after the tag before X.Y.Z), as the Python distributions
// and the CMake package carry it.
#pragma once

#include <string_view>

namespace kcoral {

[[nodiscard]] std::string_view version();

}  // namespace kcoral
