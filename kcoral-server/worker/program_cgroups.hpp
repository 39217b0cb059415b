// ProgramCgroups: a control group for each program (the worker process and everything it
// starts), below the group the server runs in, so that a program's limits hold for all of
// its processes together, whatever they do (fork, setsid, daemonize, fill tmpfs or memfds):
//
//   - memory: its memory limit counts every page its processes charge, anonymous memory,
//     page cache, kernel memory and the pages of tmpfs files and memfds they write
//     (shared memory is charged to the group that touched it first), with no swap
//     (memsw / memory.swap.max). Past it the OOM killer takes the whole program: on v2
//     through memory.oom.group; on v1, which has no such switch, the zygote kills the rest
//     when the group's OOM event fires (memory_event_fd). oom_kills() then tells the
//     zygote why the program ended.
//   - pids: processes and threads of the program together.
//   - cpu: the same weight for every program (v1 cpu.shares 1024, v2 cpu.weight 100), so
//     the scheduler shares the CPUs between programs, not between their threads: a program
//     of a hundred setsid children gets the share of a program of one thread.
//
// The server's group is `<own group>/<name>` (kcoral-<zygote pid>), each program's a
// child of it; with fork helpers, each helper's (kcoral-<helper pid>) is a child of it,
// and the programs' groups are children of their helper's. On cgroup v2 a group that
// holds processes cannot give controllers to groups below it (the "no internal
// processes" rule), so when the server's own group holds processes and does not give
// them yet, those processes (the server among them) are moved into a child of it,
// `kcoral-leaf`, first; a server started later from there uses the same parent. What
// cannot be had (no such controller, no permission) is left out and said in
// description(); create() fails only when no controller can be used at all.
//
// Groups are kept and used again, not removed after each program. A page of a tmpfs that
// outlives the program (its tenant's compile cache) stays charged to the group that wrote
// it, and the kernel does not move the charge when the group is removed: it keeps the
// removed group, a few kilobytes of kernel memory per CPU outside every limit, for as long
// as the page lives, so one group a program would let a tenant pin one group per page of
// its cache. Kept groups are as many as were ever in use at once.
//
// A group given back may hold what the kernel can reclaim (page cache of files read,
// kernel objects such as negative dentries): past 32 MiB of it beyond its shared memory,
// the group goes to the GroupReclaimer, a process of its own, and is taken again only
// once reclaimed. The reclaimer has 16 at a time, and 64 wait in all; a group past those
// is removed. What a
// group still holds when it is taken again, it cannot give up: tmpfs pages and their
// inodes of a compile cache, the memfd of an answer the front still holds. Its memory
// limit is raised by all it holds then, so that each program can charge its whole limit.
// While a program runs, what leaves its group (a cache's trim, an answer let go) gives it
// that much more room: the host's memory stays within the programs' limits, the caches'
// sizes and the answers' budget together.
//
// Ownership: ProgramCgroups owns the server's group and the groups kept for programs, and
// removes them when destroyed (the programs' first); each ProgramCgroup owns one program's
// directories and removes them when destroyed, killing what is still in them first, unless
// it is given back. Not thread-safe. Made in the zygote, which moves each forked child
// into its group (join); a forked child must leave with _exit, never through these
// destructors.
//
//   auto groups = ProgramCgroups::create(*read_cgroup_layout(), server_group_name(getpid()), limits);
//   auto group = groups->take();                 // before the fork
//   group->join(child);                          // the child and all it starts are in it
//   (reaped) bool out_of_memory = group->oom_kills() > 0;  groups->give_back(std::move(*group));
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "cgroup_layout.hpp"
#include "group_reclaimer.hpp"
#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

// The server group's name for the worker parent or fork helper `pid`, which makes it.
inline std::string server_group_name(pid_t pid) { return "kcoral-" + std::to_string(pid); }

struct ProgramCgroupLimits {
  std::uint64_t memory_bytes = 0;  // of the whole program; 0: none
  std::uint64_t processes = 0;     // processes and threads of the whole program; 0: none
};

class ProgramCgroup {
 public:
  ProgramCgroup() = default;
  ProgramCgroup(ProgramCgroup&& other) noexcept;
  ProgramCgroup& operator=(ProgramCgroup&& other) noexcept;
  ProgramCgroup(const ProgramCgroup&) = delete;
  ProgramCgroup& operator=(const ProgramCgroup&) = delete;
  ~ProgramCgroup();

  // Moves the process `pid` into the group, in every hierarchy: the program's first
  // process, before it starts anything.
  [[nodiscard]] Status join(pid_t pid) const;
  // How many processes of the group the OOM killer has killed since it was taken.
  [[nodiscard]] std::uint64_t oom_kills() const;
  // cgroup v1: a descriptor that becomes readable when the group runs out of memory
  // (drain it with take_memory_event); -1 on v2, where the kernel kills the whole group.
  [[nodiscard]] int memory_event_fd() const { return memory_events_.get(); }
  // Whether the memory event fired since the last call.
  bool take_memory_event() const;
  // The group's directories, one per hierarchy.
  [[nodiscard]] const std::vector<std::string>& directories() const { return directories_; }

 private:
  friend class ProgramCgroups;
  void remove();
  // Whether no process is in the group.
  [[nodiscard]] bool empty() const;
  // The kernel's count of OOM kills in the group, since it was made.
  [[nodiscard]] std::uint64_t oom_kill_count() const;
  // Sets the memory limit to `limit_bytes` beyond what the group holds, and starts
  // counting OOM kills anew: for the next program. Fails where the kernel refuses the
  // limit; the group is then removed rather than used.
  [[nodiscard]] Status prepare(std::uint64_t limit_bytes);
  // What the group holds: memory and swap together, where swap is counted.
  [[nodiscard]] std::uint64_t held_bytes() const;
  // Of that, its shared memory and swap, which no reclaim gives back without swap (from
  // memory.stat, which costs more to read: only where the group is given back).
  [[nodiscard]] std::uint64_t shared_bytes() const;
  // Writes the memory limit (on v1 memory and swap together too, in the order the kernel
  // accepts).
  [[nodiscard]] Status write_memory_limit(std::uint64_t bytes);
  // Forgets the group without removing it (a fork helper's copy of the worker parent's).
  void forget();

  CgroupVersion version_ = CgroupVersion::v2;
  std::vector<std::string> directories_;
  std::string memory_directory_;        // empty: no memory controller
  UniqueFd memory_events_;              // v1: the OOM notification's eventfd
  std::uint64_t memory_limit_ = 0;      // as written; 0: none
  std::uint64_t oom_kills_before_ = 0;  // the kernel's count when the group was taken
};

class ProgramCgroups {
 public:
  ProgramCgroups(ProgramCgroups&& other) noexcept;
  ProgramCgroups& operator=(ProgramCgroups&& other) noexcept;
  ProgramCgroups(const ProgramCgroups&) = delete;
  ProgramCgroups& operator=(const ProgramCgroups&) = delete;
  ~ProgramCgroups();

  // Makes the server's group `name` below this process's own groups (`layout`), with the
  // controllers that can be used there.
  [[nodiscard]] static Result<ProgramCgroups> create(const CgroupLayout& layout, const std::string& name,
                                                     ProgramCgroupLimits limits);
  // Makes one program's group `name`, its limits written.
  [[nodiscard]] Result<ProgramCgroup> make(const std::string& name) const;
  // A group for one program: one given back, prepared for it, or else a new one
  // (program-1, program-2, ...).
  [[nodiscard]] Result<ProgramCgroup> take();
  // Keeps a program's group for the next once its processes are gone (reclaimed first,
  // when it holds much that can be); removes it (killing what is left in it) otherwise.
  void give_back(ProgramCgroup group);
  // Readable when the reclaimer finished a group (-1 while it is not running); then call
  // reclaimed(), which keeps the groups it finished.
  [[nodiscard]] int reclaimer_fd() const { return reclaimer_.fd(); }
  void reclaimed();
  // The reclaimer's process id, a child of this process (-1 when none).
  [[nodiscard]] pid_t reclaimer_pid() const { return reclaimer_.pid(); }
  // Removes the server group `name` that create() made for a process in `layout`'s groups,
  // with the groups left in it (its helpers' and programs'), where they are empty (no
  // process is killed: a group of that name in use belongs to another): what a worker
  // parent that was killed left behind, removed by the front (front/zygote_handle.hpp).
  static void remove_left(const CgroupLayout& layout, const std::string& name);
  // Makes the server group `name` inside this one, with its controllers and limits: a fork
  // helper's, whose programs' groups go below it (worker/zygote.hpp).
  [[nodiscard]] Result<ProgramCgroups> make_inner(const std::string& name) const;
  // Forgets this group and the programs' groups it keeps without removing them: a fork
  // helper's copy of the worker parent's, which the worker parent removes (with what a
  // helper that was killed left in it).
  void disown();

  // The controllers in use, in the order of kProgramControllers.
  [[nodiscard]] const std::vector<std::string>& controllers() const { return controllers_; }
  [[nodiscard]] CgroupVersion version() const { return version_; }
  // The server's group directory of `controller` (empty when that one is not in use).
  [[nodiscard]] std::string directory(const std::string& controller) const;
  // One line: the version, the controllers in use and where; what is missing and why.
  [[nodiscard]] std::string description() const;

 private:
  ProgramCgroups() = default;
  void remove();
  // Sends the reclaimer the groups that wait, as many as it may have at a time.
  void send_to_reclaimer();

  CgroupVersion version_ = CgroupVersion::v2;
  std::map<std::string, std::string> directories_;  // controller in use -> the server's group
  std::vector<std::string> controllers_;
  std::vector<std::string> notes_;                  // what is missing, and why
  ProgramCgroupLimits limits_;
  std::vector<ProgramCgroup> kept_;                 // given back, for the next programs
  std::deque<ProgramCgroup> reclaiming_;            // to reclaim, in order; the first sent_ sent
  std::size_t sent_ = 0;
  GroupReclaimer reclaimer_;
  std::uint64_t made_ = 0;                          // names the programs' groups
};

}  // namespace kcoral
