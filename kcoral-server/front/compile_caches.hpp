// CompileCaches: each tenant's compile cache, kept across its programs.
//
// A program's sandbox dies with it, and with it what its tools compiled (Triton's kernels,
// TVM FFI's build_inline libraries, CuTeDSL's modules, compile_tirx's, the driver's PTX
// JIT cache). So that a tenant's second run of an unchanged kernel skips the compilation,
// each tenant has a cache of its own that its programs read and write:
//
//   - a tmpfs of --compile-cache-bytes (and one inode per 16 KiB), mounted under the work
//     root (<work-root>/compile-cache/<tenant>, 0700 under a 0700 directory) in the
//     server's own mount namespace the first time one of the tenant's programs runs, and
//     gone when the server ends, however it ends: the cache lives as long as the server,
//     in memory, and its bound is the kernel's;
//   - mounted, when a worker takes its first program, at kCompileCacheMount in that
//     worker's mount namespace (sandbox_layout.hpp), where the program's tools find it
//     through their own variables (program_environment.hpp). The mount is idmapped through
//     the worker's user namespace, so that what any of the tenant's programs wrote there
//     (stored as kInsideUid) is the program's own in each: no tool trips over another
//     program's permissions, and the worker's own outside user stays its own;
//   - kept under its bound least recently used first: after each of the tenant's
//     programs, once it holds more than three quarters of its bytes or inodes, its
//     entries (what each top-level directory holds, and the top-level files) go, oldest
//     access first, until it holds half; an entry used in the last 30 s stays (a running
//     program may be writing it), one dated over a minute ahead (utime can) counts as
//     the oldest, and the tmpfs's own bound stops a program that writes more than the
//     cache holds (ENOSPC). A trim walks a tenant's cache once a second at most, and reads
//     and removes at most twice as many entries as the cache has inodes, so that a tree
//     the tenant's running programs keep changing under it (a directory renamed ahead of
//     the walk each time it is opened) cannot keep it going.
//
// A tenant's cache is reachable only from its own programs' sandboxes: another tenant's
// worker never has it mounted (the pool binds a worker to the tenant of its first
// program), so a program can only ever poison its own tenant's cache. What the tools write
// concurrently is theirs to make safe (Triton and CuTeDSL write a temporary file and
// rename it, TVM FFI builds under a file lock, compile_tirx renames).
//
// The mounts need the new mount API (open_tree, mount_setattr with an idmap, move_mount;
// Linux 5.12, and 6.3 for a tmpfs) and root: open() checks that this host has them, and
// says why not when it does not (the server then runs without, and says so).
//
// Mounting is done on a thread of its own (it enters a worker's mount namespace, which a
// thread sharing its filesystem context with others may not), and trimming on another,
// so that no tenant's cache, however it is made to walk, delays another tenant's worker
// waiting for its mount; attach() and trim() queue work for them and return at once. A
// tenant has one trim queued at most.
//
//   auto caches = CompileCaches::open({work_root + "/compile-cache", 1 << 30});
//   (*caches)->attach(worker_pidfd, worker_pid, tenant, [](Status attached) { ... });
//   (*caches)->trim(tenant);  // after each of the tenant's programs
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

class CompileCaches {
 public:
  struct Config {
    std::string root;                 // made 0700; what an earlier server left there is removed
    std::uint64_t bytes_per_tenant = 0;
  };
  using Done = std::function<void(Status)>;

  // The caches, or why this host cannot have them. First moves this process (which must
  // have no other thread yet) into a mount namespace of its own, a slave of the one it was
  // in: the caches' mounts are then seen by this server's processes alone, and go with the
  // last of them, however the server ends (SIGKILL included), while what the host mounts
  // later still shows in the server.
  [[nodiscard]] static Result<std::unique_ptr<CompileCaches>> open(Config config);
  CompileCaches(const CompileCaches&) = delete;
  CompileCaches& operator=(const CompileCaches&) = delete;
  // Stops the threads (what is queued is dropped; a task running finishes) and unmounts
  // every cache.
  ~CompileCaches();

  // Mounts `tenant`'s cache in the mount namespace of the worker `pidfd` (process `pid`,
  // whose user namespace idmaps it); then `done`, on the mounting thread.
  void attach(int pidfd, pid_t pid, std::size_t tenant, Done done);
  // Evicts the least recently used entries of `tenant`'s cache if it is nearly full, on
  // the trimming thread (a tenant's second trim asked meanwhile is the same one).
  void trim(std::size_t tenant);

  [[nodiscard]] std::uint64_t bytes_per_tenant() const { return config_.bytes_per_tenant; }

 private:
  // A thread running the tasks given it in order, after `first`; `stop` drops those not
  // started.
  class TaskThread {
   public:
    explicit TaskThread(std::function<void()> first = {});
    TaskThread(const TaskThread&) = delete;
    TaskThread& operator=(const TaskThread&) = delete;
    ~TaskThread();
    void post(std::function<void()> task);
    void stop();
    void end();  // stops, and waits for the task running

   private:
    void serve(const std::function<void()>& first);
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::function<void()>> tasks_;
    bool stopping_ = false;
    std::thread thread_;
  };

  explicit CompileCaches(Config config, UniqueFd host_namespace);
  Status mount_tenant(std::size_t tenant);
  Status attach_now(int pidfd, pid_t pid, std::size_t tenant);
  void trim_now(std::size_t tenant);
  [[nodiscard]] bool is_mounted(std::size_t tenant);
  [[nodiscard]] std::string path_of(std::size_t tenant) const;

  Config config_;
  UniqueFd host_namespace_;  // this process's mount namespace, to come back to
  std::mutex mutex_;         // guards the three below
  std::vector<bool> mounted_;      // by tenant
  std::vector<bool> trim_queued_;  // by tenant
  bool mounts_usable_ = true;  // false once the mounting thread could not come back to its namespace
  // When each tenant's last trim that walked its cache ended; the trimming thread's alone.
  std::vector<std::optional<std::chrono::steady_clock::time_point>> last_trim_;
  TaskThread trims_;
  TaskThread mounts_;
};

// The eviction, apart so that it can be tested on any directory: while `directory` (a
// descriptor of a directory) holds more than `target_bytes` or `target_inodes` by
// `usage`, removes its least recently used entry (see above) not used within
// `keep_newer_than` seconds before `now` (one used more than a minute after `now` counts
// as the oldest).
// Never follows a link, never leaves the file system it starts on, holds at most 64 + a
// few descriptors however deep the tree, and reads without touching access times. Reads
// and removes `max_entries` entries at most, in all: an entry not read for its times by
// then stays. Returns the entries removed.
struct CacheUsage {
  std::uint64_t bytes = 0;
  std::uint64_t inodes = 0;
};
std::size_t evict_least_recent(int directory, std::uint64_t target_bytes, std::uint64_t target_inodes,
                               const std::function<CacheUsage()>& usage, std::int64_t now_seconds,
                               std::int64_t keep_newer_than,
                               std::uint64_t max_entries = std::numeric_limits<std::uint64_t>::max());

}  // namespace kcoral
