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
#include <optional>
#include <thread>
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
  std::vector<std::int64_t> fork_parents;
  for (const Helper& helper : helpers_) fork_parents.push_back(helper.pid);
  if (!messages::send(control_, messages::ZygoteReady{std::move(versions), std::move(fork_parents)})) return 1;
  std::optional<std::string> failure;  // why the zygote cannot go on
  bool serving = true;
  while (serving && !failure) {
    // The control channel, signals, the control groups' reclaimer, the helpers' channels,
    // (cgroup v1) each running program's memory event, and each forked worker's
    // admission, until its deadline.
    std::vector<std::pair<int, pid_t>> memory_events = sandbox_.memory_events();
    std::vector<std::pair<int, pid_t>> admissions = sandbox_.admissions();
    std::vector<pollfd> fds{{control_.fd(), POLLIN, 0}, {signal_fd, POLLIN, 0}, {sandbox_.reclaimer_fd(), POLLIN, 0}};
    for (const Helper& helper : helpers_) fds.push_back({helper.channel.fd(), POLLIN, 0});
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
    if (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) sandbox_.reclaimed();  // poll skips a -1
    std::size_t next = 3;
    for (Helper& helper : helpers_)
      if (fds[next++].revents & (POLLIN | POLLHUP | POLLERR))
        if (auto relayed = relay(helper); !relayed && !failure) failure = relayed.error().message;
    for (const auto& [fd, worker] : memory_events)
      if (fds[next++].revents & POLLIN) sandbox_.out_of_memory(worker);
    for (const auto& [fd, worker] : admissions)
      if (fds[next++].revents & (POLLIN | POLLHUP | POLLERR)) sandbox_.continue_admission(worker);
    sandbox_.expire_admissions();
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(signal_fd, &info, sizeof info) == sizeof info) serving = serving && info.ssi_signo == SIGCHLD;
      if (reap() && !failure) failure = "a helper of the worker parent exited";
    }
    if (serving && !failure && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      auto received = messages::receive(control_);
      if (!received) break;  // the front is gone (or speaks nonsense)
      if (*received)
        if (auto* fork = std::get_if<messages::Fork>(&(*received)->message)) {
          if (helpers_.empty()) fork_worker(signal_fd, *fork);
          else if (auto dispatched = dispatch(*fork); !dispatched) failure = dispatched.error().message;
        }
    }
  }
  if (failure) (void)messages::send(control_, messages::ZygoteFailed{*failure});
  end_helpers();
  for (pid_t pid : workers_) ::kill(pid, SIGKILL);
  kill_descendants();
  sandbox_.end();  // its control groups removed, with what a helper killed left in them
  for (pid_t pid : workers_) remove_tree(worker_root(pid));
  return failure ? 1 : 0;
}

Status Zygote::start_helpers(int signal_fd) {
  const std::size_t count = options_.flags.fork_parents;
  if (count <= 1) return {};
  // The trial's namespace init first: a helper's books (a copy of the sandbox's) must hold
  // no child of the zygote's.
  for (pid_t init : sandbox_.inits()) {
    ::waitpid(init, nullptr, 0);
    sandbox_.reaped(init);
  }
  const pid_t zygote = ::getpid();
  for (std::size_t index = 0; index < count; ++index) {
    auto pair = Channel::socket_pair();
    if (!pair) return std::unexpected(pair.error());
    cpython::ForkScope fork;
    pid_t pid = ::fork();
    if (pid == 0) {
      fork.in_child();
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a signal its serve() stops at, ending its workers
      if (::getppid() != zygote) ::_exit(1);
      become_subreaper();  // not inherited: what its workers leave running comes to it
      pair->first.reset();
      (void)control_.release_socket();  // closed: only the zygote speaks to the front
      for (Helper& other : helpers_) (void)other.channel.release_socket();
      helpers_.clear();
      control_ = Channel(std::move(pair->second));
      if (auto became = sandbox_.become_helper(index, count); !became) ::_exit(failed_to_start(became.error().message));
      ::_exit(serve(signal_fd, {}));
    }
    fork.in_parent();
    if (pid < 0) return system_error("forking a helper of the worker parent");
    pair->second.reset();
    helpers_.push_back({pid, Channel(std::move(pair->first)), 0});
  }
  // Each says it is ready, or why it cannot be.
  constexpr int kReadyTimeoutMs = 10000;
  for (Helper& helper : helpers_) {
    pollfd readable{helper.channel.fd(), POLLIN, 0};
    if (::poll(&readable, 1, kReadyTimeoutMs) != 1)
      return fail(ErrorKind::engine, "a helper of the worker parent did not start within 10 s");
    auto received = messages::receive(helper.channel);
    if (!received) return fail(ErrorKind::engine, "a helper of the worker parent: " + received.error().message);
    if (!*received) return fail(ErrorKind::engine, "a helper of the worker parent said nothing whole");
    if (auto* failed = std::get_if<messages::ZygoteFailed>(&(*received)->message))
      return fail(ErrorKind::engine, "a helper of the worker parent: " + failed->message);
    if (!std::holds_alternative<messages::ZygoteReady>((*received)->message))
      return fail(ErrorKind::engine, "a helper of the worker parent sent '" +
                                         std::string(messages::name_of((*received)->message)) + "' first");
  }
  return {};
}

Status Zygote::dispatch(const messages::Fork& fork) {
  // Of those with the least load, the next in turn. Live workers count, not only the forks
  // asked: a helper whose workers live long (a long program) would otherwise get its turn
  // as often as the others and could run out of its slice of the user ids while theirs
  // stand unused; and reaping, too, is shared out.
  Helper* helper = nullptr;
  for (std::size_t step = 0; step < helpers_.size(); ++step) {
    Helper& candidate = helpers_[(next_helper_ + step) % helpers_.size()];
    if (!helper || candidate.load() < helper->load()) helper = &candidate;
  }
  next_helper_ = (static_cast<std::size_t>(helper - helpers_.data()) + 1) % helpers_.size();
  if (!messages::send(helper->channel, fork)) return fail(ErrorKind::engine, "a helper of the worker parent is gone");
  ++helper->forks_asked;
  return {};
}

Status Zygote::relay(Helper& helper) {
  auto received = messages::receive(helper.channel);
  if (!received)
    return fail(ErrorKind::engine, "a helper of the worker parent " +
                                       (helper.channel.peer_closed() ? std::string("exited") : received.error().message));
  if (!*received) return {};
  messages::Received& said = **received;
  // What the zygote itself would say to the front, and nothing else.
  if (std::holds_alternative<messages::Forked>(said.message) ||
      std::holds_alternative<messages::ForkFailed>(said.message)) {
    if (helper.forks_asked == 0) return fail(ErrorKind::engine, "a helper of the worker parent forked unasked");
    --helper.forks_asked;
    if (auto* forked = std::get_if<messages::Forked>(&said.message))
      helper.workers.insert(static_cast<pid_t>(forked->pid));
    std::vector<int> fds;
    for (const UniqueFd& fd : said.fds) fds.push_back(fd.get());
    (void)messages::send(control_, said.message, fds);
  } else if (auto* exited = std::get_if<messages::Exited>(&said.message)) {
    helper.workers.erase(static_cast<pid_t>(exited->pid));
    (void)messages::send(control_, said.message);
  } else if (auto* failed = std::get_if<messages::ZygoteFailed>(&said.message)) {
    return fail(ErrorKind::engine, "a helper of the worker parent: " + failed->message);
  } else {
    return fail(ErrorKind::engine, "a helper of the worker parent sent '" +
                                       std::string(messages::name_of(said.message)) + "'");
  }
  return {};
}

void Zygote::end_helpers() {
  for (Helper& helper : helpers_) helper.channel = Channel();  // its serve() ends at that
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (const Helper& helper : helpers_) {
    while (!helper.died && ::waitpid(helper.pid, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(helper.pid, SIGKILL);
        ::waitpid(helper.pid, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  helpers_.clear();
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

bool Zygote::reap() {
  bool any = false;
  bool helper_ended = false;
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    auto helper = std::find_if(helpers_.begin(), helpers_.end(), [&](const Helper& h) { return h.pid == pid; });
    if (helper != helpers_.end()) {
      helper->died = helper_ended = true;
      continue;
    }
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
    for (const Helper& helper : helpers_) keep.push_back(helper.pid);
    if (pid_t reclaimer = sandbox_.reclaimer_pid(); reclaimer > 0) keep.push_back(reclaimer);
    kill_descendants(keep);
  }
  return helper_ended;
}

// One worker less than asked for, for want of a resource that may come back: the front counts
// a failed start of the worker's group (and backs off), while this zygote and its running
// workers go on.
void Zygote::fork_failed(const std::string& message) { (void)messages::send(control_, messages::ForkFailed{message}); }

}  // namespace kcoral
