// Where kcoral-server's programs find each other: beside the running binary.
#pragma once

#include <string>

namespace kcoral {

// `name` in the directory of this process's executable (from /proc/self/exe).
[[nodiscard]] std::string beside_this_binary(const std::string& name);

}  // namespace kcoral
