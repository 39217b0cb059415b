// Process trees: finding and killing what a program left running.
//
// Workers are child subreapers, so everything a program starts (daemons included) stays
// below them; when a worker itself dies, its orphans fall to the zygote, the next
// subreaper up. Both kill what is left with kill_descendants.
#pragma once

#include <sys/types.h>

#include <vector>

namespace kcoral {

// The parent of `pid`, or -1 when there is no such process (read from /proc).
[[nodiscard]] pid_t parent_of(pid_t pid);
// Direct children of `parent` (read from /proc).
[[nodiscard]] std::vector<pid_t> children_of(pid_t parent);
// Makes this process adopt orphaned descendants.
void become_subreaper();
// SIGKILLs every descendant of this (subreaper) process except `keep`, reaping those that
// are its own children, until none is left. Returns how many were killed.
int kill_descendants(const std::vector<pid_t>& keep = {});

}  // namespace kcoral
