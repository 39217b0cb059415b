// Workspace-relative paths: the protocol's canonical form and the collision rule between
// file uploads.
#include "kcoral/program.hpp"

#include <algorithm>

namespace kcoral {

Result<std::string> normalize_workspace_path(std::string_view path) {
  if (path.empty()) return fail(ErrorKind::parse, "path must be a non-empty string");
  if (path.find('\0') != std::string_view::npos)
    return fail(ErrorKind::parse, "path must not contain NUL");
  if (path.find('\\') != std::string_view::npos)
    return fail(ErrorKind::parse, "path must use '/' separators, not backslashes");
  if (path.front() == '/') return fail(ErrorKind::parse, "path must be relative");
  if (path.size() > 4096) return fail(ErrorKind::parse, "path is longer than 4096 bytes");

  std::string normalized;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part == "..") return fail(ErrorKind::parse, "path must not contain a '..' component");
    if (part.size() > 255)
      return fail(ErrorKind::parse, "path has a component longer than 255 bytes");
    if (!part.empty() && part != ".") {
      if (!normalized.empty()) normalized += '/';
      normalized += part;
    }
    start = end + 1;
  }
  if (normalized.empty()) return fail(ErrorKind::parse, "path must name a file or folder");
  return normalized;
}

Status check_path_collisions(std::vector<std::string_view> paths) {
  // Ordering by components puts every path right before its descendants, even with
  // siblings such as "a-b" sorting between "a" and "a/b" bytewise.
  auto component_less = [](std::string_view a, std::string_view b) {
    while (true) {
      std::size_t ia = a.find('/'), ib = b.find('/');
      std::string_view ha = a.substr(0, ia), hb = b.substr(0, ib);
      if (ha != hb) return ha < hb;
      if (ia == std::string_view::npos || ib == std::string_view::npos)
        return ia == std::string_view::npos && ib != std::string_view::npos;
      a.remove_prefix(ia + 1);
      b.remove_prefix(ib + 1);
    }
  };
  std::sort(paths.begin(), paths.end(), component_less);
  for (std::size_t i = 1; i < paths.size(); ++i) {
    std::string_view previous = paths[i - 1], current = paths[i];
    if (previous == current)
      return fail(ErrorKind::parse, "two file uploads share the path '" + std::string(current) + "'");
    if (current.size() > previous.size() && current.starts_with(previous) &&
        current[previous.size()] == '/')
      return fail(ErrorKind::parse, "file upload paths '" + std::string(previous) + "' and '" +
                                        std::string(current) +
                                        "' conflict: one would be a directory of the other");
  }
  return {};
}

}  // namespace kcoral
