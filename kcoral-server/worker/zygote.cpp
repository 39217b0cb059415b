// Zygote: fork on request, reap and report, clean up after workers.
#define PY_SSIZE_T_CLEAN
#include "zygote.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "courier.hpp"
#include "fork_scope.hpp"
#include "interpreter.hpp"
#include "kcoral/remove_tree.hpp"
#include "messages.hpp"
#include "process_tree.hpp"
#include "program_process.hpp"
#include "kcoral/read_to_end.hpp"

namespace kcoral {

Result<pid_t> Zygote::fork_child(const std::function<void()>& child) {
  cpython::ForkScope fork;
  auto pid = sandbox_.fork();
  if (pid && *pid == 0) {
    fork.in_child();
    child();
    ::_exit(1);
  }
  fork.in_parent();
  if (pid) sandbox_.admit(*pid);
  return pid;
}

Status Zygote::trial() {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return fail(ErrorKind::engine, std::string("pipe: ") + std::strerror(errno));
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  auto pid = fork_child([&] {
    read_end.reset();
    auto entered = sandbox_.enter({write_end.get()}, "");
    std::string report = entered ? "ok" : entered.error().message;
    if (::write(write_end.get(), report.data(), report.size()) < 0) ::_exit(1);  // the zygote sees no report
    ::_exit(0);
  });
  if (!pid) return std::unexpected(pid.error());
  write_end.reset();
  sandbox_.continue_admission(*pid, /*wait=*/true);  // before serving: no other child to fork meanwhile
  std::string report = read_to_end(read_end.get());
  ::waitpid(*pid, nullptr, 0);
  (void)sandbox_.release(*pid);
  if (report != "ok")
    return fail(ErrorKind::engine, "the sandbox cannot be set up here: " +
                                       (report.empty() ? std::string("the trial worker died") : report));
  return {};
}

int Zygote::failed_to_start(const std::string& message) {
  (void)messages::send(control_, messages::ZygoteFailed{message});
  return 1;
}

int Zygote::serve(int signal_fd, std::map<std::string, std::string> versions) {
  if (!messages::send(control_, messages::ZygoteReady{std::move(versions)})) return 1;
  while (true) {
    // The control channel, signals, (cgroup v1) each running program's memory event, and
    // each forked worker's admission, until its deadline.
    std::vector<std::pair<int, pid_t>> memory_events = sandbox_.memory_events();
    std::vector<std::pair<int, pid_t>> admissions = sandbox_.admissions();
    std::vector<pollfd> fds{{control_.fd(), POLLIN, 0}, {signal_fd, POLLIN, 0}};
    for (const auto& [fd, worker] : memory_events) fds.push_back({fd, POLLIN, 0});
    for (const auto& [fd, worker] : admissions) fds.push_back({fd, POLLIN, 0});
    int timeout_ms = -1;
    if (auto deadline = sandbox_.admission_deadline()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 60000));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    for (std::size_t i = 0; i < memory_events.size(); ++i)
      if (fds[2 + i].revents & POLLIN) sandbox_.out_of_memory(memory_events[i].second);
    for (std::size_t i = 0; i < admissions.size(); ++i)
      if (fds[2 + memory_events.size() + i].revents & (POLLIN | POLLHUP | POLLERR))
        sandbox_.continue_admission(admissions[i].second);
    sandbox_.expire_admissions();
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      bool stop = false;
      while (::read(signal_fd, &info, sizeof info) == sizeof info) stop = stop || info.ssi_signo != SIGCHLD;
      reap();
      if (stop) break;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      auto received = messages::receive(control_);
      if (!received) break;  // the front is gone (or speaks nonsense)
      if (*received)
        if (auto* fork = std::get_if<messages::Fork>(&(*received)->message)) fork_worker(signal_fd, *fork);
    }
  }
  for (pid_t pid : workers_) ::kill(pid, SIGKILL);
  kill_descendants();
  sandbox_.end();
  for (pid_t pid : workers_) remove_tree(worker_root(pid));
  return 0;
}

std::string Zygote::worker_root(pid_t pid) const { return options_.flags.work_root + "/" + std::to_string(pid); }

void Zygote::fork_worker(int signal_fd, const messages::Fork& fork) {
  const std::string& visible_devices = fork.visible_devices;
  auto pair = Channel::socket_pair();
  if (!pair) return fork_failed(pair.error().message);
  auto pid = fork_child([&] {
    // Its environment is the programs' list (program_environment.hpp), nothing of the
    // zygote's: pinned to its GPU by UUID before anything in it can touch CUDA, through
    // os.environ, so that programs see the same values CUDA does.
    ProgramEnvironmentSpec spec;
    spec.interpreter_bin = options_.interpreter_bin;
    if (options_.flags.device == "gpu" && std::filesystem::is_directory(kCudaToolkitBin))
      spec.system_path = std::string(kCudaToolkitBin) + ":" + kDefaultSystemPath;
    if (!sandbox_.config().enabled) {  // no scratch space of its own: its directory under the work root
      spec.home = spec.tmpdir = worker_root(::getpid());
      std::error_code ec;
      std::filesystem::create_directories(spec.home, ec);
    } else {  // the tenant's compile cache, or its stand-in in the scratch space
      spec.compile_cache = kCompileCacheMount;
      spec.compile_cache_bytes = options_.flags.compile_cache_bytes;
    }
    spec.visible_devices = visible_devices;
    spec.cuda_connections = static_cast<int>(std::clamp<std::int64_t>(fork.cuda_connections, 0, 32));
    spec.operator_variables = options_.program_environment;
    EnvironmentVariables environment = program_environment(spec);
    cpython::replace_environment(environment);
    ::close(signal_fd);
    (void)control_.release_socket();  // closed: only the zygote may hold the front's line
    pair->first.reset();
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::setsid();  // its own process group: the front kills the whole group on timeout
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    Channel channel(std::move(pair->second));
    auto sandboxed_root = sandbox_.enter({channel.fd()}, visible_devices);
    if (!sandboxed_root) {
      (void)messages::send(channel, messages::Failed{sandboxed_root.error().message});
      ::_exit(1);
    }
    become_subreaper();  // what the program leaves running stays below the worker
    auto courier = Courier::start(channel.release_socket());
    if (!courier) ::_exit(1);
    std::string root = sandboxed_root->empty() ? worker_root(::getpid()) : *sandboxed_root;
    ProgramProcessOptions process{root, options_.flags.device == "gpu", options_.flags.programs_per_worker,
                                  options_.flags.reuse_check, fork.refuse_multi_stream, fork.warm_up};
    ::_exit(serve_programs(executor_, **courier, process));
  });
  if (!pid) return fork_failed(pid.error().message);
  workers_.insert(*pid);
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, *pid, 0)));
  if (!pidfd) {
    ::kill(*pid, SIGKILL);  // reaped as any worker; the front never hears of it
    return fork_failed(std::string("pidfd_open (Linux 5.3): ") + std::strerror(errno));
  }
  std::array<int, 2> fds{pair->first.get(), pidfd.get()};
  (void)messages::send(control_, messages::Forked{*pid}, fds);
}

void Zygote::reap() {
  bool any = false;
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    if (workers_.erase(pid) == 0) {  // an orphan we adopted, or a namespace's init
      sandbox_.reaped(pid);
      continue;
    }
    any = true;
    bool out_of_memory = sandbox_.release(pid);
    remove_tree(worker_root(pid));
    messages::Exited exited{pid, std::nullopt, std::nullopt, std::nullopt};
    if (out_of_memory) exited.out_of_memory = true;
    if (WIFEXITED(status)) exited.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) exited.signal = WTERMSIG(status);

    (void)messages::send(control_, exited);
  }
  // Whatever a dead worker left running was handed to us; nothing of it may live on. (The
  // live workers' namespace inits are ours too, and stay.)
  if (any) {
    std::vector<pid_t> keep(workers_.begin(), workers_.end());
    for (pid_t init : sandbox_.inits()) keep.push_back(init);
    kill_descendants(keep);
  }
}

// One worker less than asked for, for want of a resource that may come back: the front counts
// a failed start of the worker's group (and backs off), while this zygote and its running
// workers go on.
void Zygote::fork_failed(const std::string& message) { (void)messages::send(control_, messages::ForkFailed{message}); }

}  // namespace kcoral
