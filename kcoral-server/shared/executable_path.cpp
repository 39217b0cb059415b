// beside_this_binary through /proc/self/exe.
#include "executable_path.hpp"

#include <unistd.h>

namespace kcoral {

std::string beside_this_binary(const std::string& name) {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return name;
  std::string exe(path, static_cast<std::size_t>(n));
  return exe.substr(0, exe.rfind('/') + 1) + name;
}

}  // namespace kcoral
