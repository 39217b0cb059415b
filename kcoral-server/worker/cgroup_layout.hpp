// CgroupLayout: where the control groups of this process are, for the controllers that
// bound a program (memory, pids, cpu), as the kernel describes them in
// /proc/self/mountinfo and /proc/self/cgroup.
//
// cgroup v1 mounts a hierarchy per controller (or per few: `cpu,cpuacct`), and a process
// sits in one group of each; cgroup v2 has one hierarchy for all. A host may have both
// (the v2 one then often holds no controller): a controller mounted on a v1 hierarchy is
// used there, and the v2 hierarchy only when none of the three is on v1. The group of a
// process is named relative to its cgroup namespace's root, and a mount may show a
// hierarchy from below its root (a container's), so the directory is the mount point
// plus the part of the path below the mount's root. Whether a v2 controller may be used
// below the group (its cgroup.controllers) is the reader's business: this file knows
// where, not what.
//
//   auto layout = read_cgroup_layout();   // layout->directories.at("memory"), ...
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "kcoral/error.hpp"

namespace kcoral {

enum class CgroupVersion { v1, v2 };

struct CgroupLayout {
  CgroupVersion version = CgroupVersion::v2;
  // The directory of this process's group, per controller found ("memory", "pids",
  // "cpu"). On v2 every controller maps to the one directory, whether or not it may be
  // enabled there.
  std::map<std::string, std::string> directories;
};

// The controllers a program's group is made of, in the order they are described.
inline constexpr std::string_view kProgramControllers[] = {"memory", "pids", "cpu"};

// From the texts of /proc/self/mountinfo and /proc/self/cgroup. An error when no
// hierarchy holds any of the controllers and no v2 hierarchy is mounted.
[[nodiscard]] Result<CgroupLayout> parse_cgroup_layout(std::string_view mountinfo, std::string_view self_cgroup);
// The same, read from /proc/self.
[[nodiscard]] Result<CgroupLayout> read_cgroup_layout();

}  // namespace kcoral
