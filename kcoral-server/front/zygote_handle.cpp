// ZygoteHandle: posix_spawn with the control channel as descriptor 3, then an async read loop.
#include "zygote_handle.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/bind_executor.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "process_tree.hpp"
#include "program_cgroups.hpp"
#include "program_environment.hpp"

extern char** environ;

namespace kcoral {
namespace {

// The zygote's messages are small; its versions table is the largest.
constexpr std::size_t kMaxMessageBytes = 1 << 20;

}  // namespace

std::vector<std::string> zygote_environment(char** server_environment,
                                            const std::vector<std::string>& program_environment) {
  std::vector<std::string> variables;
  auto put = [&](const std::string& assignment) {
    std::string name = assignment.substr(0, assignment.find('='));
    std::erase_if(variables, [&](const std::string& v) { return v.compare(0, name.size() + 1, name + "=") == 0; });
    variables.push_back(assignment);
  };
  for (char** entry = server_environment; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view assignment(*entry);
    for (std::string_view name : kMachineryVariables)
      if (assignment.size() > name.size() && assignment.starts_with(name) && assignment[name.size()] == '=')
        put(std::string(assignment));
  }
  put(std::string("PATH=") + kDefaultSystemPath);
  put("LANG=C.UTF-8");
  put(std::string(kGlibcTunables) + "=" + kLargeAllocationsInHugePages);
  for (const std::string& assignment : program_environment) put(assignment);
  return variables;
}

ZygoteHandle::ZygoteHandle(Strand strand, ZygoteConfig config, Callbacks callbacks)
    : strand_(strand), config_(std::move(config)), callbacks_(std::move(callbacks)), readable_(strand) {}

// A worker parent on its way out: the front waits for its exit on the strand, escalating
// from closing its channel (on which it kills its workers and exits) to SIGTERM after a
// second and SIGKILL two seconds later, and reaps it.
struct ZygoteHandle::Exiting {
  Exiting(Strand strand, Process exiting) : process(std::move(exiting)), exited(strand), deadline(strand) {}
  Process process;
  boost::asio::posix::stream_descriptor exited;  // a copy of its pidfd: readable once it exits
  boost::asio::steady_timer deadline;
  int signal = SIGTERM;  // the next one sent at the deadline
};

ZygoteHandle::~ZygoteHandle() {
  // Shutting down: what still exits is waited for here, at most three seconds each.
  stop();
  for (const auto& exiting : exiting_) {
    boost::system::error_code ignored;
    exiting->exited.close(ignored);
    exiting->deadline.cancel();
    finish(exiting->process);
  }
  remove_left_groups();
}

// A worker parent killed (SIGKILL, the OOM killer) cannot remove its server group and the
// groups in it (its helpers' and its programs'); the next start, a second or more after
// its end, does (and the handle's end, for the last one), where they are empty: a group
// with processes in it is left as it is, and nothing is killed for it.
void ZygoteHandle::remove_left_groups() {
  if (left_groups_.empty()) return;
  if (auto layout = read_cgroup_layout())
    for (pid_t pid : left_groups_) ProgramCgroups::remove_left(*layout, server_group_name(pid));
  left_groups_.clear();
}

Status ZygoteHandle::start() {
  remove_left_groups();
  auto pair = Channel::socket_pair();
  if (!pair) return std::unexpected(pair.error());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pair->second.get(), 3);  // dup2 clears CLOEXEC
  std::vector<std::string> args = config_.worker.to_argv();
  args.insert(args.begin(), {config_.python, "-c", kWorkerBootstrap});
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> environment = zygote_environment(environ, config_.worker.program_environment);
  std::vector<char*> envp;
  for (std::string& variable : environment) envp.push_back(variable.data());
  envp.push_back(nullptr);
  // The front ignores SIGPIPE; user programs must not inherit that (nor its signal mask).
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setsigmask(&attributes, &empty);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, config_.python.c_str(), &actions, &attributes, argv.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return fail(ErrorKind::engine, "cannot start the worker parent (" + config_.python + "): " + std::strerror(rc));
  auto process = Process::open(pid);  // our child, not reaped: its pid is still its own
  if (!process) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return fail(ErrorKind::engine, "cannot hold the worker parent: " + process.error().message);
  }
  process_ = std::move(*process);
  started_pid_ = process_.pid();
  channel_ = Channel(std::move(pair->first), kMaxMessageBytes);
  ready_ = false;
  fork_parents_.clear();
  forks_asked_ = 0;
  ::fcntl(channel_.fd(), F_SETFL, O_NONBLOCK);
  int watched = ::fcntl(channel_.fd(), F_DUPFD_CLOEXEC, 3);
  if (watched < 0) {  // out of descriptors: the new parent is of no use
    int error = errno;
    stop();
    return fail(ErrorKind::engine, std::string("cannot watch the worker parent's channel: ") + std::strerror(error));
  }
  readable_.assign(watched);
  wait_readable();
  return {};
}

void ZygoteHandle::request_fork(const messages::Fork& fork) {
  if (!channel_.valid()) return;
  ++forks_asked_;
  if (!messages::send(channel_, fork)) lost("the worker parent stopped answering");
}

void ZygoteHandle::stop() {
  boost::system::error_code ignored;
  readable_.close(ignored);
  channel_ = Channel();  // the zygote exits on the closed channel, killing its children
  if (process_) retire(std::move(process_));
}

void ZygoteHandle::retire(Process process) {
  if (config_.worker.sandboxed) left_groups_.push_back(process.pid());
  auto exiting = std::make_shared<Exiting>(strand_, std::move(process));
  int watched = ::fcntl(exiting->process.pidfd(), F_DUPFD_CLOEXEC, 3);
  if (watched < 0) return finish(exiting->process);  // out of descriptors: wait here instead
  exiting->exited.assign(watched);
  exiting_.push_back(exiting);
  std::weak_ptr<Exiting> weak = exiting;
  auto forget = [this](const std::shared_ptr<Exiting>& gone) { std::erase(exiting_, gone); };
  exiting->exited.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                             [weak, forget](boost::system::error_code ec) {
                               auto exited = weak.lock();  // gone with this handle
                               if (ec || !exited) return;
                               exited->process.reap();
                               exited->deadline.cancel();
                               forget(exited);
                             });
  escalate(weak, std::chrono::seconds(1));
}

void ZygoteHandle::escalate(std::weak_ptr<Exiting> weak, std::chrono::milliseconds after) {
  auto exiting = weak.lock();
  if (!exiting) return;
  exiting->deadline.expires_after(after);
  exiting->deadline.async_wait([this, weak](boost::system::error_code ec) {
    auto late = weak.lock();  // gone with this handle
    if (ec || !late) return;
    late->process.signal(late->signal);
    if (late->signal == SIGTERM) {
      late->signal = SIGKILL;
      escalate(weak, std::chrono::seconds(2));
    }
  });
}

void ZygoteHandle::finish(Process& process) {
  if (process.wait_for_exit(std::chrono::seconds(1))) return;
  process.signal(SIGTERM);
  if (process.wait_for_exit(std::chrono::seconds(2))) return;
  process.signal(SIGKILL);
  process.wait_for_exit(std::chrono::hours(1));  // SIGKILL: only a wedged kernel call delays it
}

void ZygoteHandle::wait_readable() {
  readable_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                       boost::asio::bind_executor(strand_, [this](boost::system::error_code ec) {
                         if (ec) return;  // cancelled by stop()
                         read_messages();
                       }));
}

void ZygoteHandle::read_messages() {
  while (channel_.valid()) {
    auto received = messages::receive(channel_);
    if (!received) {
      lost(channel_.peer_closed() ? "the worker parent exited" : received.error().message);
      return;
    }
    if (!*received) break;
    handle(std::move(**received));
  }
  if (channel_.valid()) wait_readable();
}

void ZygoteHandle::handle(messages::Received received) {
  if (auto* ready = std::get_if<messages::ZygoteReady>(&received.message)) {
    if (ready_) return lost("the worker parent said ready twice");
    ready_ = true;
    for (std::int64_t pid : ready->fork_parents) {
      // Its own children, each named once.
      if (pid <= 1 || pid != static_cast<pid_t>(pid) || parent_of(static_cast<pid_t>(pid)) != process_.pid() ||
          std::find(fork_parents_.begin(), fork_parents_.end(), static_cast<pid_t>(pid)) != fork_parents_.end())
        return lost("the worker parent named pid " + std::to_string(pid) + " as a helper, not a child of its own");
      fork_parents_.push_back(static_cast<pid_t>(pid));
    }
    callbacks_.on_ready(std::move(ready->versions));
  } else if (auto* forked = std::get_if<messages::Forked>(&received.message)) {
    if (forks_asked_ == 0) return lost("the worker parent forked a worker nobody asked for");
    --forks_asked_;
    auto pid = static_cast<pid_t>(forked->pid);
    // A child already reaped has no parent to check; its exit notice follows.
    pid_t parent = forked->pid > 1 && forked->pid == pid ? parent_of(pid) : 0;
    bool by_helper = std::find(fork_parents_.begin(), fork_parents_.end(), parent) != fork_parents_.end();
    if (parent != -1 && parent != process_.pid() && !by_helper)
      return lost("the worker parent named pid " + std::to_string(forked->pid) + ", not a child of its own or of "
                  "its helpers");
    auto process = Process::adopt(pid, std::move(received.fds[1]));
    if (!process) return lost("the worker parent's fork: " + process.error().message);
    callbacks_.on_forked(std::move(*process), std::move(received.fds[0]));
  } else if (auto* exited = std::get_if<messages::Exited>(&received.message)) {
    std::string how = exited->signal ? "killed by signal " + std::to_string(*exited->signal)
                                     : "exit code " + std::to_string(exited->exit_code.value_or(0));
    std::optional<std::string> failure;
    if (exited->out_of_memory.value_or(false))
      failure = "the program ran out of memory: its processes together reached its memory limit of " +
                std::to_string(config_.worker.sandbox_policy.memory_bytes >> 20) + " MiB (--memory-limit-bytes " +
                std::to_string(config_.worker.sandbox_policy.memory_bytes) + "), and all of them were killed";
    callbacks_.on_exited(static_cast<pid_t>(exited->pid), how, std::move(failure));
  } else if (auto* failed = std::get_if<messages::ZygoteFailed>(&received.message)) {
    callbacks_.on_failed(failed->message);
  } else if (auto* fork_failed = std::get_if<messages::ForkFailed>(&received.message)) {
    if (forks_asked_ == 0) return lost("the worker parent failed a fork nobody asked for");
    --forks_asked_;
    callbacks_.on_fork_failed(fork_failed->message);
  } else {
    lost("the worker parent sent '" + std::string(messages::name_of(received.message)) + "'");
  }
}

void ZygoteHandle::lost(const std::string& why) {
  boost::system::error_code ignored;
  readable_.close(ignored);
  channel_ = Channel();
  if (process_) {
    process_.signal(SIGKILL);
    retire(std::move(process_));
  }
  callbacks_.on_failed(why);
}

}  // namespace kcoral
