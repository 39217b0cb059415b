// remove_tree through std::filesystem, with a second pass that restores permissions.
#include "kcoral/remove_tree.hpp"

#include <sys/stat.h>

#include <filesystem>

namespace kcoral {

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (!ec) return;
  // A program may have made directories unreadable or unwritable; give them back.
  for (auto it = std::filesystem::recursive_directory_iterator(
           path, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec))
      ::chmod(it->path().c_str(), 0700);
  }
  ::chmod(path.c_str(), 0700);
  std::filesystem::remove_all(path, ec);
}

}  // namespace kcoral
