// Sandbox: what a worker process may see and do, set up between its fork and its first
// program, with the kernel's own interfaces (namespaces, mounts, seccomp, rlimits).
//
// A sandboxed worker has a PID namespace of its own (the zygote makes one per fork),
// whose init is the process the zygote forked (it reaps orphans, and when the worker
// ends, ends the same way: an exit code of 128 + N for signal N). The worker enters its
// own mount, IPC, network, UTS, cgroup and user namespaces:
//   - it sees no other process, and nothing it starts outlives it (the kernel kills a
//     namespace's processes when its first process ends);
//   - its filesystem is a new root: the system (/usr, /etc with its secrets masked, /opt,
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
//   // zygote, once:  Sandbox sandbox(config);     sandbox.prepare();
//   // per fork:      auto child = sandbox.fork();  (child: sandbox.enter(...); parent: sandbox.admit(pid))
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

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
  std::vector<std::string> readable_paths;  // read-only, besides the system's
};

class Sandbox {
 public:
  explicit Sandbox(SandboxConfig config) : config_(std::move(config)) {}

  // In the zygote, before Python starts (single-threaded): makes sure the zygote may
  // create namespaces, entering a user namespace of its own when it is not root.
  [[nodiscard]] Status prepare_zygote();
  // In the zygote, once the interpreter is up: what the workers will be shown.
  void add_readable_paths(const std::vector<std::string>& paths);

  // Forks a worker into a new PID namespace. In the parent: the child's pid (or an
  // error); in the child: 0. The parent must call admit() next.
  [[nodiscard]] Result<pid_t> fork();
  // Parent: maps the child's user namespace once it has made one (or gives up on it).
  void admit(pid_t child);
  // Child: sets everything up. `keep` are descriptors to keep (all others are closed,
  // standard streams included, which then point at /dev/null); `visible_devices` names
  // the GPU (a UUID) whose device nodes the worker gets. Returns where programs' working
  // directories go.
  [[nodiscard]] Result<std::string> enter(std::vector<int> keep, const std::string& visible_devices);

  [[nodiscard]] const SandboxConfig& config() const { return config_; }

 private:
  SandboxConfig config_;
  std::vector<std::string> readable_;
  UniqueFd own_pid_namespace_;  // the zygote's, to fork the next worker from
  UniqueFd admit_parent_, admit_child_;  // a socket pair for the uid-map handshake
  bool zygote_is_root_ = true;
};

}  // namespace kcoral
