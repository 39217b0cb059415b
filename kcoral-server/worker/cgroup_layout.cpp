// CgroupLayout from mountinfo (proc(5): fields up to " - ", then the file system type,
// its source and its super options, where a v1 hierarchy names its controllers) and from
// /proc/self/cgroup (hierarchy-id:controllers:path; v2 is "0::path").
#include "cgroup_layout.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace kcoral {
namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// Mount points escape space, tab, newline and backslash as three octal digits.
std::string unescape(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size() &&
        std::all_of(text.begin() + i + 1, text.begin() + i + 4, [](char c) { return c >= '0' && c <= '7'; })) {
      out.push_back(static_cast<char>((text[i + 1] - '0') * 64 + (text[i + 2] - '0') * 8 + (text[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

struct Mount {
  std::string root;         // the part of the hierarchy the mount shows
  std::string mount_point;
  bool v2 = false;
  std::vector<std::string> controllers;  // v1
};

std::vector<Mount> cgroup_mounts(std::string_view mountinfo) {
  std::vector<Mount> mounts;
  for (std::string_view line : split(mountinfo, '\n')) {
    std::size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    std::vector<std::string_view> before = split(line.substr(0, dash), ' ');
    std::vector<std::string_view> after = split(line.substr(dash + 3), ' ');
    if (before.size() < 5 || after.size() < 3) continue;
    Mount mount{unescape(before[3]), unescape(before[4]), after[0] == "cgroup2", {}};
    if (after[0] != "cgroup" && after[0] != "cgroup2") continue;
    if (!mount.v2)
      for (std::string_view option : split(after[2], ','))
        if (std::find(std::begin(kProgramControllers), std::end(kProgramControllers), option) !=
            std::end(kProgramControllers))
          mount.controllers.emplace_back(option);
    mounts.push_back(std::move(mount));
  }
  return mounts;
}

// The directory of group `path` on `mount`, or nothing when the mount does not show it.
std::optional<std::string> directory_of(const Mount& mount, const std::string& path) {
  std::string below;
  if (mount.root == "/") {
    below = path;
  } else if (path == mount.root) {
    below = "/";
  } else if (path.size() > mount.root.size() && path.compare(0, mount.root.size(), mount.root) == 0 &&
             path[mount.root.size()] == '/') {
    below = path.substr(mount.root.size());
  } else {
    return std::nullopt;
  }
  std::string directory = mount.mount_point;
  if (below != "/") directory += below;
  return directory;
}

}  // namespace

Result<CgroupLayout> parse_cgroup_layout(std::string_view mountinfo, std::string_view self_cgroup) {
  std::vector<Mount> mounts = cgroup_mounts(mountinfo);
  std::map<std::string, std::string> v1_paths;  // controller -> this process's group
  std::optional<std::string> v2_path;
  for (std::string_view line : split(self_cgroup, '\n')) {
    std::vector<std::string_view> fields = split(line, ':');
    if (fields.size() < 3) continue;
    // The path may itself hold colons: it is everything after the second.
    std::string path(line.substr(fields[0].size() + fields[1].size() + 2));
    if (fields[0] == "0" && fields[1].empty()) {
      v2_path = path;
      continue;
    }
    for (std::string_view controller : split(fields[1], ',')) v1_paths.emplace(controller, path);
  }

  CgroupLayout layout;
  layout.version = CgroupVersion::v1;
  for (const Mount& mount : mounts) {
    for (const std::string& controller : mount.controllers) {
      auto path = v1_paths.find(controller);
      if (path == v1_paths.end() || layout.directories.contains(controller)) continue;
      if (auto directory = directory_of(mount, path->second)) layout.directories.emplace(controller, *directory);
    }
  }
  if (!layout.directories.empty()) return layout;

  layout.version = CgroupVersion::v2;
  if (v2_path) {
    for (const Mount& mount : mounts) {
      if (!mount.v2) continue;
      if (auto directory = directory_of(mount, *v2_path)) {
        for (std::string_view controller : kProgramControllers) layout.directories.emplace(controller, *directory);
        return layout;
      }
    }
  }
  return fail(ErrorKind::engine, "no control group hierarchy with memory, pids or cpu is mounted here");
}

Result<CgroupLayout> read_cgroup_layout() {
  auto slurp = [](const char* path) {
    std::ifstream file(path);
    std::ostringstream text;
    text << file.rdbuf();
    return text.str();
  };
  return parse_cgroup_layout(slurp("/proc/self/mountinfo"), slurp("/proc/self/cgroup"));
}

}  // namespace kcoral
