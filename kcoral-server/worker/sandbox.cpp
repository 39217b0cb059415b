// Sandbox: the zygote's side (its own namespace, the workers' user ids and control groups,
// the uid-map handshake, forking into a PID namespace) and enter(), which a worker runs
// as the steps of sandbox_entry.hpp, then loads the seccomp filter.
#include "sandbox.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "cgroup_layout.hpp"
#include "descriptor_table.hpp"
#include "sandbox_entry.hpp"
#include "sandbox_layout.hpp"
#include "seccomp_filter.hpp"

namespace kcoral {
namespace {

namespace fs = std::filesystem;

constexpr auto kAdmitTimeout = std::chrono::seconds(10);

Status write_file(const std::string& path, const std::string& text) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return system_error("opening " + path);
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return system_error("writing " + path);
  return {};
}

}  // namespace

Status Sandbox::prepare_zygote() {
  if (!config_.enabled) return {};
  zygote_is_root_ = ::geteuid() == 0;
  if (!zygote_is_root_) {
    // Root of a user namespace of its own: enough to make PID namespaces and to map the
    // workers' users to the server's own.
    uid_t uid = ::geteuid();
    gid_t gid = ::getegid();
    if (::unshare(CLONE_NEWUSER) != 0)
      return system_error("cannot make a user namespace for the sandbox (run as root, allow unprivileged user "
                          "namespaces, or start with --sandbox none)");
    if (auto s = write_file("/proc/self/setgroups", "deny"); !s) return s;
    if (auto s = write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1"); !s) return s;
    if (auto s = write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"); !s) return s;
  }
  own_pid_namespace_ = UniqueFd(::open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC));
  if (!own_pid_namespace_) return system_error("opening /proc/self/ns/pid");
  int lifeline[2];
  if (::pipe2(lifeline, O_CLOEXEC) != 0) return system_error("pipe");
  lifeline_read_ = UniqueFd(lifeline[0]);
  lifeline_write_ = UniqueFd(lifeline[1]);
  if (::access(config_.init_path.c_str(), X_OK) != 0) return system_error("cannot run " + config_.init_path);
  auto filter = SeccompFilter::compile();
  if (!filter) return std::unexpected(filter.error());
  filter_ = std::move(*filter);
  KCORAL_TRY(sandbox_entry::make_directories(config_.root_mountpoint));
  add_readable_paths(config_.policy.readable_paths);
  if (zygote_is_root_) {
    if (config_.policy.first_uid == 0 || config_.policy.last_uid < config_.policy.first_uid)
      return fail(ErrorKind::engine, "the sandbox's user id range may not include root, and must not be empty");
    take_uids(config_.policy.first_uid, config_.policy.last_uid);
  }
  make_cgroups();
  return {};
}

void Sandbox::take_uids(uid_t first, uid_t last) {
  std::uniform_int_distribution<std::uint64_t> offset(0, std::uint64_t{last} - first);
  std::random_device random;
  uids_.emplace(first, last, static_cast<uid_t>(first + offset(random)));
}

void Sandbox::make_cgroups() {
  if (!config_.cgroups) {
    no_cgroups_ = "not asked for";
    return;
  }
  auto layout = read_cgroup_layout();
  auto groups = layout ? ProgramCgroups::create(*layout, server_group_name(::getpid()),
                                                {config_.policy.memory_bytes, config_.policy.processes})
                       : Result<ProgramCgroups>(std::unexpected(layout.error()));
  if (groups) cgroups_ = std::move(*groups);
  else no_cgroups_ = groups.error().message;
}

Status Sandbox::become_helper(std::size_t index, std::size_t count) {
  if (!config_.enabled) return {};
  if (uids_) {
    std::uint64_t share = (std::uint64_t{config_.policy.last_uid} - config_.policy.first_uid + 1) / count;
    if (share == 0)
      return fail(ErrorKind::engine, "the sandbox's user id range (--sandbox-uid-range) has fewer ids than there "
                                     "are worker parents (--fork-parents)");
    auto first = static_cast<uid_t>(config_.policy.first_uid + index * share);
    take_uids(first, index + 1 == count ? config_.policy.last_uid : static_cast<uid_t>(first + share - 1));
  }
  if (cgroups_) {
    // Its group inside the zygote's, which stays the server's one group (the start line
    // names it) and is the zygote's to remove.
    auto inner = cgroups_->make_inner(server_group_name(::getpid()));
    if (!inner) return fail(ErrorKind::engine, "a fork helper's control group: " + inner.error().message);
    cgroups_->disown();
    cgroups_ = std::move(*inner);
  }
  return {};
}

std::string Sandbox::limits_description() const {
  if (!config_.enabled) return "no sandbox: programs share every limit with the server";
  auto mib = [](std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; };
  const char* per_process_memory = config_.gpu ? "data segment" : "address space";
  std::string text;
  auto uses = [&](const char* controller) {
    return cgroups_ && std::find(cgroups_->controllers().begin(), cgroups_->controllers().end(), controller) !=
                           cgroups_->controllers().end();
  };
  if (cgroups_) {
    text = "each program in a control group of its own, " + cgroups_->description() + ". ";
  } else {
    text = "no control groups (" + no_cgroups_ + "). ";
  }
  if (uses("memory"))
    text += "Memory: " + mib(config_.policy.memory_bytes) + " for all of a program's processes together, tmpfs and memfd "
            "pages included, no swap, the whole program killed past it (and " + mib(config_.policy.memory_bytes) + " of " +
            per_process_memory + " per process). ";
  else
    text += "Memory: per process only (" + mib(config_.policy.memory_bytes) + " of " + per_process_memory +
            "), not for a program's processes together, nor its tmpfs and memfd pages beyond the scratch size. ";
  text += "Processes: " + std::to_string(config_.policy.processes) +
          (uses("pids") ? " per program (control group)" : "") +
          (zygote_is_root_ ? ", and per program's user (RLIMIT_NPROC). " : " per user (RLIMIT_NPROC). ");
  text += uses("cpu") ? "CPU: the same weight for every program. "
                      : "CPU: no weight per program: the CPUs are shared between threads, so a program of many "
                        "processes gets more of them. ";
  text += "Descriptors: " + std::to_string(config_.policy.open_files) + " per process, " +
          std::to_string(config_.policy.open_files * config_.policy.processes) + " per program at most. ";
  if (zygote_is_root_)
    text += "Users: each worker runs as a user of its own outside, from " + std::to_string(config_.policy.first_uid) + "-" +
            std::to_string(config_.policy.last_uid) + ", which owns its user namespace and its per-user kernel counts.";
  else
    text += "Users: the server is not root, so every program runs as the server's user outside, and the kernel's "
            "per-user counts (processes, inotify instances, pipe buffers, user namespaces) are shared by all "
            "programs and the server.";
  return text;
}

void Sandbox::add_readable_paths(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (path.empty() || path[0] != '/') continue;
    std::error_code ec;
    fs::path real = fs::weakly_canonical(path, ec);
    if (ec || !fs::exists(real, ec)) continue;
    readable_.push_back(real.string());
  }
  // Kept as the workers will mount them: sorted, each once, none under another or under
  // the system's own (which every worker mounts anyway).
  auto under = [](const std::string& path, std::string_view parent) {
    return path == parent || (path.size() > parent.size() && path.compare(0, parent.size(), parent) == 0 &&
                              path[parent.size()] == '/');
  };
  std::sort(readable_.begin(), readable_.end());
  std::vector<std::string> kept;
  for (std::string& path : readable_) {
    if ((!kept.empty() && under(path, kept.back())) ||
        std::any_of(std::begin(kSystemPaths), std::end(kSystemPaths), [&](const char* p) { return under(path, p); }))
      continue;
    kept.push_back(std::move(path));
  }
  readable_ = std::move(kept);
}

Result<pid_t> Sandbox::fork() {
  if (!config_.enabled) {
    pid_t pid = ::fork();
    if (pid < 0) return system_error("fork");
    return pid;
  }
  forking_ = Worker{};
  if (uids_) {
    forking_.uid = uids_->take();
    if (!forking_.uid)
      return fail(ErrorKind::engine, "every user id of the sandbox's range is in use (" +
                                         std::to_string(uids_->size()) + "); give a larger --sandbox-uid-range");
  }
  auto abandon = [&] {  // the fork does not happen: what it took goes back
    give_back(forking_);
    forking_ = Worker{};
  };
  if (cgroups_) {
    auto group = cgroups_->take();
    if (!group) {
      abandon();
      return std::unexpected(group.error());
    }
    forking_.cgroup = std::move(*group);
  }
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    abandon();
    return system_error("socketpair");
  }
  admit_parent_ = UniqueFd(pair[0]);
  admit_child_ = UniqueFd(pair[1]);
  if (::unshare(CLONE_NEWPID) != 0) {
    abandon();
    return system_error("cannot make a PID namespace");
  }
  // The namespace's first process is its init; the worker comes second.
  auto back = [&]() -> Status {  // the next fork starts from the zygote's own namespace again
    if (::setns(own_pid_namespace_.get(), CLONE_NEWPID) != 0) return system_error("setns back to the zygote's");
    return {};
  };
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, lifeline_read_.get(), 3);
  posix_spawn_file_actions_addclosefrom_np(&actions, 4);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t init = -1;
  char* argv[] = {const_cast<char*>("kcoral-init"), nullptr};
  char* envp[] = {nullptr};
  int rc = ::posix_spawn(&init, config_.init_path.c_str(), &actions, &attributes, argv, envp);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    (void)back();
    abandon();
    errno = rc;
    return system_error("starting " + config_.init_path);
  }
  forking_.init = init;
  pid_t pid = ::fork();
  int saved = errno;
  if (pid != 0) {
    Status returned = back();
    admit_child_.reset();
    if (pid > 0) {
      workers_[pid] = std::move(forking_);
    } else {
      ::kill(init, SIGKILL);  // reaped as any released worker's init
      ending_[init] = std::move(forking_);
    }
    forking_ = Worker{};
    if (!returned) return std::unexpected(returned.error());
  } else {
    admit_parent_.reset();
  }
  errno = saved;
  if (pid < 0) return system_error("fork");
  return pid;
}

void Sandbox::admit(pid_t child) {
  if (!config_.enabled) return;
  UniqueFd socket = std::move(admit_parent_);
  // Into its control group before it runs anything of a program's (it waits for its
  // admission's answer first: continue_admission), while it sets up its mounts: moving a
  // process between groups can wait on the kernel for milliseconds (cgroup v1), which the
  // child's own setup then hides. Until then it runs the sandbox's code only, charged to
  // the zygote.
  auto worker = workers_.find(child);
  if (worker != workers_.end() && worker->second.cgroup && !worker->second.cgroup->join(child)) {
    ::kill(child, SIGKILL);  // never runs outside its limits
    return;
  }
  admitting_[child] = {std::move(socket), std::chrono::steady_clock::now() + kAdmitTimeout};
}

std::vector<std::pair<int, pid_t>> Sandbox::admissions() const {
  std::vector<std::pair<int, pid_t>> sockets;
  for (const auto& [child, admission] : admitting_) sockets.emplace_back(admission.socket.get(), child);
  return sockets;
}

std::optional<std::chrono::steady_clock::time_point> Sandbox::admission_deadline() const {
  std::optional<std::chrono::steady_clock::time_point> first;
  for (const auto& [child, admission] : admitting_)
    if (!first || admission.deadline < *first) first = admission.deadline;
  return first;
}

void Sandbox::expire_admissions() {
  auto now = std::chrono::steady_clock::now();
  std::erase_if(admitting_, [&](const auto& entry) { return entry.second.deadline <= now; });
}

void Sandbox::continue_admission(pid_t child, bool wait) {
  auto admitting = admitting_.find(child);
  if (admitting == admitting_.end()) return;
  UniqueFd socket = std::move(admitting->second.socket);
  auto deadline = admitting->second.deadline;
  admitting_.erase(admitting);
  if (wait) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd readable{socket.get(), POLLIN, 0};
    if (left.count() <= 0 || ::poll(&readable, 1, static_cast<int>(left.count())) != 1) return;
  }
  char byte = 0;
  if (::read(socket.get(), &byte, 1) != 1 || byte != 'u') return;
  // The child made its user namespace: map its one user, unprivileged outside.
  auto worker = workers_.find(child);
  uid_t outside_uid = zygote_is_root_ && worker != workers_.end() && worker->second.uid ? *worker->second.uid : 0;
  if (zygote_is_root_ && outside_uid == 0) {
    ::kill(child, SIGKILL);  // never mapped to root
    return;
  }
  gid_t outside_gid = outside_uid;
  std::string proc = "/proc/" + std::to_string(child);
  bool mapped = write_file(proc + "/setgroups", "deny") &&
                write_file(proc + "/gid_map", std::to_string(kInsideGid) + " " + std::to_string(outside_gid) + " 1") &&
                write_file(proc + "/uid_map", std::to_string(kInsideUid) + " " + std::to_string(outside_uid) + " 1");
  byte = mapped ? 'k' : 'x';
  if (::write(socket.get(), &byte, 1) != 1) ::kill(child, SIGKILL);  // it cannot go on unmapped
}

bool Sandbox::release(pid_t child) {
  auto it = workers_.find(child);
  if (it == workers_.end()) return false;
  Worker worker = std::move(it->second);
  workers_.erase(it);
  admitting_.erase(child);
  bool out_of_memory = worker.ran_out_of_memory || (worker.cgroup && worker.cgroup->oom_kills() > 0);
  if (worker.init > 0) {
    ::kill(worker.init, SIGKILL);  // the zygote reaps it like any child, then reaped() ends the rest
    pid_t init = worker.init;
    ending_[init] = std::move(worker);
  } else {
    give_back(worker);
  }
  return out_of_memory;
}

void Sandbox::reaped(pid_t pid) {
  auto it = ending_.find(pid);
  if (it == ending_.end()) {
    // An init that ended before its worker was released (it cannot, while the worker
    // lives, but its pid must never be signalled once reaped).
    for (auto& [worker, record] : workers_)
      if (record.init == pid) record.init = -1;
    return;
  }
  give_back(it->second);  // its namespace, and so its control group, is empty now
  ending_.erase(it);
}

void Sandbox::give_back(Worker& worker) {
  if (worker.uid) uids_->give_back(*worker.uid);
  worker.uid.reset();
  if (worker.cgroup) cgroups_->give_back(std::move(*worker.cgroup));
  worker.cgroup.reset();
}

std::vector<pid_t> Sandbox::inits() const {
  std::vector<pid_t> pids;
  for (const auto& [worker, record] : workers_)
    if (record.init > 0) pids.push_back(record.init);
  for (const auto& [init, record] : ending_) pids.push_back(init);
  return pids;
}

std::vector<std::pair<int, pid_t>> Sandbox::memory_events() const {
  std::vector<std::pair<int, pid_t>> events;
  for (const auto& [worker, record] : workers_)
    if (record.cgroup && record.cgroup->memory_event_fd() >= 0) events.emplace_back(record.cgroup->memory_event_fd(), worker);
  return events;
}

void Sandbox::out_of_memory(pid_t worker) {
  auto it = workers_.find(worker);
  if (it == workers_.end() || !it->second.cgroup || !it->second.cgroup->take_memory_event()) return;
  // The namespace's init takes every process of the program with it; the worker is
  // killed too, so that it ends at once rather than when the kernel gets to it.
  it->second.ran_out_of_memory = true;
  if (it->second.init > 0) ::kill(it->second.init, SIGKILL);
  ::kill(-worker, SIGKILL);
  ::kill(worker, SIGKILL);
}

void Sandbox::end() {
  admitting_.clear();
  workers_.clear();
  ending_.clear();
  forking_ = Worker{};
  cgroups_.reset();
}

Result<std::string> Sandbox::enter(std::vector<int> keep, const std::string& visible_devices) {
  if (!config_.enabled) return std::string();
  UniqueFd admit = std::move(admit_child_);
  keep.push_back(admit.get());
  std::vector<sandbox_entry::NvidiaGpu> gpus;
  if (config_.gpu) {
    auto found = sandbox_entry::find_gpus(visible_devices);
    if (!found) return std::unexpected(found.error());
    gpus = std::move(*found);
  }
  const std::string& root = config_.root_mountpoint;
  // A root zygote's worker owns its scratch as its outside user; otherwise as root inside.
  std::optional<uid_t> outside_user = zygote_is_root_ ? forking_.uid : std::nullopt;

  KCORAL_TRY(sandbox_entry::enter_namespaces());
  KCORAL_TRY(sandbox_entry::mount_system(root, config_.gpu, gpus));
  KCORAL_TRY(sandbox_entry::mount_scratch(root, config_.policy.scratch_bytes, outside_user.value_or(0)));
  KCORAL_TRY(sandbox_entry::mount_readable(root, readable_));
  KCORAL_TRY(sandbox_entry::mount_var(root));
  KCORAL_TRY(sandbox_entry::mount_dev(root, config_.gpu, gpus));
  KCORAL_TRY(sandbox_entry::mount_proc(root));
  KCORAL_TRY(sandbox_entry::pivot_into(root));
  KCORAL_TRY(sandbox_entry::keep_only(std::move(keep)));
  KCORAL_TRY(sandbox_entry::become_unprivileged(outside_user, std::move(admit)));
  KCORAL_TRY(sandbox_entry::apply_limits(config_));
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return system_error("no_new_privs");
  KCORAL_TRY(filter_->load());
  if (::chdir(kScratch) != 0) return system_error("chdir to the scratch space");
  return std::string(kScratch);
}

}  // namespace kcoral
