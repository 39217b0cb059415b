// Process: another process, held by a pidfd, so that what is sent to it can never reach a
// process that took its pid after it was reaped (pidfd_open(2), pidfd_send_signal(2)).
//
// The front holds each worker parent it starts and each worker the parent forks this way;
// signals go through the pidfd, and a process group is signalled only while its leader is
// held and not reaped. The worker parent itself keeps its workers by pid: it is their
// parent, so none of their pids can be reused before it has reaped them.
//
//   auto child = kcoral::Process::open(pid);   // a child of ours, not yet reaped
//   child->signal(SIGTERM);
//   if (!child->wait_for_exit(std::chrono::seconds(1))) child->signal(SIGKILL);
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

class Process {
 public:
  Process() = default;
  // Holds `pid` by a new pidfd: for a child of this process that it has not reaped.
  [[nodiscard]] static Result<Process> open(pid_t pid);
  // Holds `pid` by `pidfd`, opened by whoever could name it safely (its parent), once the
  // kernel confirms that `pidfd` is a pidfd of `pid`, or of a process already reaped, which
  // is then never signalled (/proc/self/fdinfo).
  [[nodiscard]] static Result<Process> adopt(pid_t pid, UniqueFd pidfd);

  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  [[nodiscard]] explicit operator bool() const { return pidfd_.valid(); }
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] int pidfd() const { return pidfd_.get(); }

  // Sends `signal` (0 only asks) while the process exists, exited but unreaped included.
  // False once it has been reaped, or when nothing is held.
  bool signal(int signal) const;
  // Sends `signal` to the process group the process leads, and to the process, while it is
  // not reaped (its pid cannot name another group before). False when it was not sent.
  bool signal_group(int signal) const;
  // Whether the process has exited (its pidfd is readable); false when nothing is held.
  [[nodiscard]] bool exited() const;
  // For a child of this process: reaps it if it has exited, returning its wait status
  // (waitpid's); nullopt while it runs. Reaped, it stays held, and signals no longer go out.
  std::optional<int> reap();
  // For a child: waits up to `timeout` for it to exit and reaps it; whether it did.
  bool wait_for_exit(std::chrono::milliseconds timeout);

 private:
  Process(pid_t pid, UniqueFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  bool reaped_ = false;
};

}  // namespace kcoral
