// Process: signals and waits through a pidfd.
#include "process.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstdint>
#include <csignal>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>

namespace kcoral {

Result<Process> Process::open(pid_t pid) {
  if (pid <= 0) return fail(ErrorKind::engine, "no process " + std::to_string(pid));
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) return fail(ErrorKind::engine, "pidfd_open of " + std::to_string(pid) + ": " + std::strerror(errno));
  return Process(pid, std::move(pidfd));
}

Result<Process> Process::adopt(pid_t pid, UniqueFd pidfd) {
  if (pid <= 0 || !pidfd) return fail(ErrorKind::engine, "no process or no pidfd");
  // A pidfd's fdinfo says "Pid:\t<pid>", or -1 once the process is reaped (it may have
  // died at once: its exit notice follows); no other kind of descriptor has that line.
  std::ifstream info("/proc/self/fdinfo/" + std::to_string(pidfd.get()));
  std::string line;
  while (std::getline(info, line))
    if (line.starts_with("Pid:")) {
      std::string_view number = line;
      number.remove_prefix(std::min(number.find_first_not_of(" \t", 4), number.size()));
      long named = 0;
      auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), named);
      if (error != std::errc() || (named != pid && named != -1)) break;
      Process process(pid, std::move(pidfd));
      process.reaped_ = named == -1;  // reaped already: nothing will be signalled
      return process;
    }
  return fail(ErrorKind::engine, "descriptor " + std::to_string(pidfd.get()) + " is not a pidfd of process " +
                                     std::to_string(pid));
}

Process::Process(Process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), pidfd_(std::move(other.pidfd_)), reaped_(std::exchange(other.reaped_, false)) {}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    reaped_ = std::exchange(other.reaped_, false);
  }
  return *this;
}

bool Process::signal(int signal) const {
  return pidfd_ && !reaped_ && ::syscall(SYS_pidfd_send_signal, pidfd_.get(), signal, nullptr, 0) == 0;
}

bool Process::signal_group(int signal) const {
  // While the leader is held unreaped (the pidfd answers), no other process or group can
  // have its pid; the group is signalled, then the leader itself, should it have left it.
  if (!this->signal(0)) return false;
  ::kill(-pid_, signal);
  return this->signal(signal);
}

bool Process::exited() const {
  if (!pidfd_) return false;
  pollfd ready{pidfd_.get(), POLLIN, 0};
  return ::poll(&ready, 1, 0) == 1;
}

std::optional<int> Process::reap() {
  if (!pidfd_ || reaped_) return std::nullopt;
  siginfo_t info{};
  int rc;
  do {
    rc = ::waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED | WNOHANG);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 || info.si_pid == 0) return std::nullopt;  // still running (or not our child)
  reaped_ = true;
  // As waitpid reports it: an exit code, or the signal that ended it.
  return info.si_code == CLD_EXITED ? W_EXITCODE(info.si_status, 0) : W_EXITCODE(0, info.si_status);
}

bool Process::wait_for_exit(std::chrono::milliseconds timeout) {
  if (!pidfd_) return false;
  if (reaped_) return true;
  pollfd ready{pidfd_.get(), POLLIN, 0};
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    int rc = ::poll(&ready, 1, static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30)));
    if (rc == 1) return reap().has_value() || reaped_;
    if (rc < 0 && errno != EINTR) return false;
    if (rc == 0 && std::chrono::steady_clock::now() >= deadline) return false;
  }
}

}  // namespace kcoral
