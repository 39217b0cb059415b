// GroupReclaimer: a process of its own that reclaims what a program left charged to its
// memory control group (page cache of files it read, kernel objects such as the negative
// dentries of names it looked up) before the group serves another program.
//
// Reclaiming is the kernel's work, done in the context of the process that asks for it, and
// it can take seconds: a program that fills its group with three GiB of negative dentries
// leaves four seconds of it. Asked by the worker parent, whose one thread forks, admits and
// reaps every worker, it would stop every tenant's workers meanwhile. So the worker parent
// (or a fork helper) forks this process the first time it needs it, a copy of itself that
// runs nothing but the loop below (no Python, no allocation), and sends it the directory
// of each group to reclaim; it answers each one when done, in order. It is named
// kcoral-reclaim, and ends when its socket closes, or with its parent (PR_SET_PDEATHSIG).
//
// Not thread-safe; the worker parent's.
//
//   GroupReclaimer reclaimer;
//   reclaimer.send(directory, v1);             // starts it the first time
//   (poll reclaimer.fd() readable) for (auto& done : reclaimer.done()) ...
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

class GroupReclaimer {
 public:
  GroupReclaimer() = default;
  GroupReclaimer(GroupReclaimer&& other) noexcept;
  GroupReclaimer& operator=(GroupReclaimer&& other) noexcept;
  GroupReclaimer(const GroupReclaimer&) = delete;
  GroupReclaimer& operator=(const GroupReclaimer&) = delete;
  ~GroupReclaimer();

  // Asks for the memory group `directory` (of cgroup v1 when `v1`, else v2) to be
  // reclaimed; starts the process first if it is not running. Fails when it cannot be
  // started or is gone.
  [[nodiscard]] Status send(const std::string& directory, bool v1);
  // Readable when a reclaim is done or the process is gone; -1 before its start.
  [[nodiscard]] int fd() const { return socket_.get(); }
  // The directories reclaimed since the last call, in the order sent.
  [[nodiscard]] std::vector<std::string> done();
  // Whether it was started and has not ended.
  [[nodiscard]] bool running() const { return socket_.get() >= 0; }
  // Its process id (-1 when not running): a child of this process, which its reaping and
  // the killing of orphans must leave alone.
  [[nodiscard]] pid_t pid() const { return pid_; }
  // Forgets it without ending it: a fork helper's copy of the worker parent's.
  void forget();

 private:
  [[nodiscard]] Status start();
  void stop();

  UniqueFd socket_;
  UniqueFd pidfd_;  // opened at its fork: its pid alone may name another process once reaped
  pid_t pid_ = -1;
};

}  // namespace kcoral
