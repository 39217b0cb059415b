// Sandbox: what a worker process may see and do, set up between its fork and its first
// program, with the kernel's own interfaces (namespaces, mounts, seccomp, rlimits).
//
// A sandboxed worker has a PID namespace of its own: per fork, the zygote makes one,
// starts kcoral-init in it (init_main.cpp) and forks the worker into it, an ordinary
// process beside its init; the zygote ends the init, and with it the namespace, when it
// reaps the worker. The worker enters its own mount, IPC, network, UTS, cgroup and user
// namespaces:
//   - it sees no other process, and nothing it starts outlives it (the kernel kills a
//     namespace's processes when its first process ends);
//   - its filesystem is a new root: the system (/usr, /etc, /opt,
//     /sys) and the Python environment read-only; a private tmpfs of `scratch_bytes` for
//     /tmp (also /var/tmp, /dev/shm, the working directory and HOME) that vanishes with
//     it; a /dev of null, zero, full, random, urandom and, on a GPU server, the worker's
//     GPU's nodes (/dev/nvidia<N>, nvidiactl, nvidia-uvm) and no others;
//   - no network but a loopback of its own;
//   - an unprivileged user (uid 1000 inside, `uid` outside when the server runs as root)
//     with no capabilities and no way to gain any (no_new_privs);
//   - a seccomp filter against what a benchmark never needs (seccomp_filter.hpp);
//   - resource limits: memory (address space on a CPU server; on a GPU server, where CUDA
//     reserves address space far beyond memory, the data segment), file size, processes
//     and threads, open files, no core dumps.
// Only the descriptors the worker needs survive (standard streams point at /dev/null).
//
//   // zygote, once:  Sandbox sandbox(config);     sandbox.prepare_zygote();
//   // per fork:      auto child = sandbox.fork();  (child: sandbox.enter(...); parent: sandbox.admit(pid))
//   // reaped:        sandbox.release(pid);
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"
#include "seccomp_filter.hpp"

namespace kcoral {

struct SandboxConfig {
  bool enabled = true;  // false: --sandbox none, nothing of the above
  bool gpu = false;
  std::uint64_t memory_bytes = std::uint64_t{8} << 30;
  std::uint64_t file_size_bytes = std::uint64_t{1} << 30;
  std::uint64_t processes = 256;  // processes and threads of one program
  std::uint64_t open_files = 16384;
  std::uint64_t scratch_bytes = std::uint64_t{2} << 30;
  uid_t uid = 65534;  // outside, when the server runs as root
  gid_t gid = 65534;
  std::string root_mountpoint;            // an empty directory to build new roots on
  std::string init_path;                  // kcoral-init
  std::vector<std::string> readable_paths;  // read-only, besides the system's
};

class Sandbox {
 public:
  explicit Sandbox(SandboxConfig config) : config_(std::move(config)) {}

  // In the zygote, before Python starts (single-threaded): makes sure the zygote may
  // create namespaces, entering a user namespace of its own when it is not root.
  [[nodiscard]] Status prepare_zygote();
  // In the zygote, once the interpreter is up: more paths the workers may read (the
  // config's are added by prepare_zygote).
  void add_readable_paths(const std::vector<std::string>& paths);

  // Forks a worker into a new PID namespace (with its init). In the parent: the child's
  // pid (or an error); in the child: 0. The parent must call admit() next.
  [[nodiscard]] Result<pid_t> fork();
  // Parent: maps the child's user namespace once it has made one (or gives up on it).
  void admit(pid_t child);
  // Parent, once the worker `child` was reaped: ends its namespace's init.
  void release(pid_t child);
  // The inits of the workers not yet released (children of the zygote, like the workers).
  [[nodiscard]] std::vector<pid_t> inits() const;
  // Child: sets everything up. `keep` are descriptors to keep (all others are closed,
  // standard streams included, which then point at /dev/null); `visible_devices` names
  // the GPU (a UUID) whose device nodes the worker gets. Returns where programs' working
  // directories go.
  [[nodiscard]] Result<std::string> enter(std::vector<int> keep, const std::string& visible_devices);

  [[nodiscard]] const SandboxConfig& config() const { return config_; }

 private:
  SandboxConfig config_;
  std::vector<std::string> readable_;  // canonical, sorted, none under another
  UniqueFd own_pid_namespace_;  // the zygote's, to fork the next worker from
  UniqueFd admit_parent_, admit_child_;  // a socket pair for the uid-map handshake
  UniqueFd lifeline_read_, lifeline_write_;  // inits end when the zygote's end closes
  std::map<pid_t, pid_t> inits_;             // worker -> the init of its namespace
  std::optional<SeccompFilter> filter_;      // compiled once, loaded by each worker
  bool zygote_is_root_ = true;
};

}  // namespace kcoral
