// Sandbox: what a worker process may see and do, set up between its fork and its first
// program, with the kernel's own interfaces (namespaces, mounts, control groups, seccomp,
// rlimits).
//
// A sandboxed worker has a PID namespace of its own: per fork, the zygote makes one,
// starts kcoral-init in it (init_main.cpp) and forks the worker into it, an ordinary
// process beside its init; the zygote ends the init, and with it the namespace, when it
// reaps the worker. The worker enters its own mount, IPC, network, UTS, cgroup and user
// namespaces:
//   - it sees no other process, and nothing it starts outlives it (the kernel kills a
//     namespace's processes when its first process ends);
//   - its filesystem is a new root: the system (/usr, /etc, /opt) and the Python
//     environment read-only; of /sys only what Python, the CUDA driver and its tools read
//     (kSysPaths in sandbox.cpp: the CPUs and NUMA nodes, the PCI bus's links and the
//     worker's own GPU, the NVIDIA modules; never the network interfaces); a private tmpfs
//     of `scratch_bytes` (and an inode per 16 KiB of it) for /tmp (also /var/tmp,
//     /dev/shm, the working directory and HOME) that vanishes with it; a /dev of null,
//     zero, full, random, urandom and, on a GPU server, the worker's GPU's nodes
//     (/dev/nvidia<N>, nvidiactl, nvidia-uvm) and no others;
//   - no network but a loopback of its own;
//   - an unprivileged user (uid 1000 inside; outside, when the server runs as root, an id
//     of its own from the operator's range, user_id_pool.hpp, which also owns its user
//     namespace, so that the kernel's per-user counts of the program are charged to it)
//     with no capabilities and no way to gain any (no_new_privs);
//   - a seccomp filter against what a benchmark never needs (seccomp_filter.hpp);
//   - a control group of its own where the host lets the server make them
//     (program_cgroups.hpp): memory of all its processes together, tmpfs and memfd pages
//     included, no swap, the whole program killed past it; processes and threads; an
//     equal CPU weight;
//   - resource limits per process: memory (address space on a CPU server; on a GPU
//     server, where CUDA reserves address space far beyond memory, the data segment),
//     file size, processes and threads (per user, so per program), open files, no core
//     dumps.
// Only the descriptors the worker needs survive (standard streams point at /dev/null).
//
//   // zygote, once:  Sandbox sandbox(config);     sandbox.prepare_zygote();
//   // per fork:      auto child = sandbox.fork();  (child: sandbox.enter(...); parent: sandbox.admit(pid))
//   // its admission: when a socket of sandbox.admissions() is readable, sandbox.continue_admission(pid);
//   //                sandbox.expire_admissions() at sandbox.admission_deadline()
//   // reaped:        bool out_of_memory = sandbox.release(pid);  ...  sandbox.reaped(init);
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"
#include "program_cgroups.hpp"
#include "sandbox_policy.hpp"
#include "seccomp_filter.hpp"
#include "user_id_pool.hpp"

namespace kcoral {

struct SandboxConfig {
  bool enabled = true;  // false: --sandbox none, nothing of the above
  bool gpu = false;
  SandboxPolicy policy;  // limits, outside users, readable paths
  bool cgroups = true;           // a control group per program, where they can be made
  std::string root_mountpoint;  // an empty directory to build new roots on
  std::string init_path;        // kcoral-init
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
  // In a fork helper (Zygote::start_helpers), a copy of the zygote that forks workers
  // beside it, before its first fork: its workers take their user ids from its own slice
  // (`index` of `count`) of the range, so that no two live workers share one, and their
  // control groups go under a group of its own inside the zygote's, which it removes at
  // its end.
  [[nodiscard]] Status become_helper(std::size_t index, std::size_t count);

  // What bounds each program here, for the server's start: its control group (or why
  // there is none, and what holds instead) and the user it runs as outside.
  [[nodiscard]] std::string limits_description() const;

  // Forks a worker into a new PID namespace (with its init), with a user id and a control
  // group of its own. In the parent: the child's pid (or an error); in the child: 0. The
  // parent must call admit() next.
  [[nodiscard]] Result<pid_t> fork();
  // Parent: moves the child into its control group, and waits, without blocking, for it to
  // make its user namespace, which it does after its mounts: the zygote forks the next
  // worker meanwhile, so that workers set themselves up side by side (one at a time, the
  // zygote's wait for each was most of a fresh worker's start).
  void admit(pid_t child);
  // Parent: the children whose admission waits, each with its socket: readable (or hung
  // up) when the child made its namespace, or gave up.
  [[nodiscard]] std::vector<std::pair<int, pid_t>> admissions() const;
  // Parent: maps the user namespace of `child`, whose socket is readable, and lets it go
  // on; or gives up on it (it died, or said something else): it then ends on its own.
  // `wait`: first waits for the socket, until the admission's deadline.
  void continue_admission(pid_t child, bool wait = false);
  // Parent: when the first waiting admission is given up (none: nullopt); and giving up
  // those past it (their children, unmapped, end on their own).
  [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> admission_deadline() const;
  void expire_admissions();
  // Parent, once the worker `child` was reaped: ends its namespace's init. Whether its
  // program ran out of memory (the OOM killer took one of its processes, and with it the
  // program).
  bool release(pid_t child);
  // Parent, for every child reaped: a released worker's init, once reaped, gives back its
  // user id and its control group (its namespace, and so its group, is empty then), which
  // a later worker takes again (ProgramCgroups::take).
  void reaped(pid_t pid);
  // The inits not yet reaped (children of the zygote, like the workers).
  [[nodiscard]] std::vector<pid_t> inits() const;
  // Parent: the control groups' reclaimer (ProgramCgroups), a child of the zygote too: its
  // socket, readable when it finished a group (then call reclaimed()), and its process id;
  // -1 when it is not running.
  [[nodiscard]] int reclaimer_fd() const { return cgroups_ ? cgroups_->reclaimer_fd() : -1; }
  void reclaimed() {
    if (cgroups_) cgroups_->reclaimed();
  }
  [[nodiscard]] pid_t reclaimer_pid() const { return cgroups_ ? cgroups_->reclaimer_pid() : -1; }
  // Parent (cgroup v1): descriptors that become readable when a worker's program runs out
  // of memory, each with the worker; then call out_of_memory(worker).
  [[nodiscard]] std::vector<std::pair<int, pid_t>> memory_events() const;
  // Parent: the program of `worker` ran out of memory: all of it is killed, as the OOM
  // killer of cgroup v1 kills only one process.
  void out_of_memory(pid_t worker);
  // Parent, at the zygote's end, once every child is killed and reaped: removes the
  // programs' control groups, then the server's.
  void end();
  // Child: sets everything up. `keep` are descriptors to keep (all others are closed,
  // standard streams included, which then point at /dev/null); `visible_devices` names
  // the GPUs (UUIDs joined by commas) whose device nodes the worker gets, and no other's:
  // a GPU it names that the driver does not list fails the start. Returns where programs'
  // working directories go.
  [[nodiscard]] Result<std::string> enter(std::vector<int> keep, const std::string& visible_devices);

  [[nodiscard]] const SandboxConfig& config() const { return config_; }

 private:
  // A forked worker's own: its namespace's init, outside user and control group.
  struct Worker {
    pid_t init = -1;
    std::optional<uid_t> uid;
    std::optional<ProgramCgroup> cgroup;
    bool ran_out_of_memory = false;  // its memory event fired and it was killed for it
  };

  // A child's admission between admit() and its user namespace.
  struct Admission {
    UniqueFd socket;
    std::chrono::steady_clock::time_point deadline;
  };

  // A root zygote's users: ids `first` to `last`, the first one taken at random among them.
  void take_uids(uid_t first, uid_t last);
  // The server's control group, named after this process, or why there is none.
  void make_cgroups();
  // Gives back a worker's user id and control group, once its processes are gone.
  void give_back(Worker& worker);

  SandboxConfig config_;
  std::vector<std::string> readable_;  // canonical, sorted, none under another
  UniqueFd own_pid_namespace_;  // the zygote's, to fork the next worker from
  UniqueFd admit_parent_, admit_child_;  // a socket pair for the uid-map handshake
  UniqueFd lifeline_read_, lifeline_write_;  // inits end when the zygote's end closes
  // Declared before the workers, whose groups are inside it, so that it is removed last.
  std::optional<ProgramCgroups> cgroups_;
  std::optional<UserIdPool> uids_;           // a root zygote's
  std::map<pid_t, Worker> workers_;          // by worker pid, until released
  std::map<pid_t, Worker> ending_;           // released, by init pid, until the init is reaped
  std::map<pid_t, Admission> admitting_;     // by worker pid, until mapped or given up
  Worker forking_;                           // the next worker's; in the child, its own
  std::string no_cgroups_;                   // why there are none
  std::optional<SeccompFilter> filter_;      // compiled once, loaded by each worker
  bool zygote_is_root_ = true;
};

}  // namespace kcoral
