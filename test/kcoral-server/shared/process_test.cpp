// Process: signals go through the pidfd and stop once the process is reaped, so a pid taken
// by another process is never signalled; adopt() takes only a pidfd of the pid it names.
#include "process.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

namespace {

using namespace std::chrono_literals;

// A child that waits for signals in a process group of its own, its handlers the default
// ones (not the test runner's, which a fork inherits), returned once they are.
pid_t sleeper() {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGTERM, SIG_DFL);
    ::setpgid(0, 0);
    (void)!::write(ready[1], "r", 1);
    while (true) ::pause();
  }
  ::setpgid(pid, pid);
  char byte;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  ::close(ready[0]);
  ::close(ready[1]);
  return pid;
}

}  // namespace

TEST_CASE("a held child is signalled until it is reaped, and never after") {
  auto child = kcoral::Process::open(sleeper());
  REQUIRE(child.has_value());
  CHECK(child->signal(0));
  CHECK_FALSE(child->exited());
  CHECK_FALSE(child->reap().has_value());  // still running
  CHECK(child->signal(SIGKILL));
  REQUIRE(child->wait_for_exit(5s));
  CHECK(child->exited());
  // Reaped: its pid may now be anyone's, and nothing goes out.
  CHECK_FALSE(child->signal(0));
  CHECK_FALSE(child->signal_group(SIGKILL));
  CHECK(::waitpid(child->pid(), nullptr, WNOHANG) == -1);  // no zombie left behind
}

TEST_CASE("reap returns the wait status as waitpid would") {
  auto reaped = [](kcoral::Process& child) {
    for (int i = 0; i < 500 && !child.exited(); ++i) ::usleep(10000);
    return child.reap();
  };
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(7);
  auto exited = kcoral::Process::open(pid);
  REQUIRE(exited.has_value());
  auto status = reaped(*exited);
  REQUIRE(status.has_value());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 7);
  auto killed = kcoral::Process::open(sleeper());
  REQUIRE(killed.has_value());
  killed->signal(SIGTERM);
  status = reaped(*killed);
  REQUIRE(status.has_value());
  CHECK(WIFSIGNALED(*status));
  CHECK(WTERMSIG(*status) == SIGTERM);
  CHECK_FALSE(killed->reap().has_value());  // once
}

TEST_CASE("signal_group reaches the whole group the process leads") {
  pid_t leader = sleeper();
  pid_t member = ::fork();
  if (member == 0) {
    ::setpgid(0, leader);
    while (true) ::pause();
  }
  ::setpgid(member, leader);
  auto held = kcoral::Process::open(leader);
  auto other = kcoral::Process::open(member);
  REQUIRE(held.has_value());
  REQUIRE(other.has_value());
  CHECK(held->signal_group(SIGKILL));
  CHECK(held->wait_for_exit(5s));
  CHECK(other->wait_for_exit(5s));
}

TEST_CASE("wait_for_exit gives up at its timeout while the child runs") {
  auto child = kcoral::Process::open(sleeper());
  REQUIRE(child.has_value());
  auto started = std::chrono::steady_clock::now();
  CHECK_FALSE(child->wait_for_exit(50ms));
  CHECK(std::chrono::steady_clock::now() - started >= 50ms);
  child->signal(SIGKILL);
  CHECK(child->wait_for_exit(5s));
}

TEST_CASE("adopt takes a pidfd of the named process only") {
  pid_t pid = sleeper();
  kcoral::UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  REQUIRE(pidfd.valid());
  // Another process's pidfd, and a descriptor that is no pidfd at all, are refused.
  kcoral::UniqueFd again(::fcntl(pidfd.get(), F_DUPFD_CLOEXEC, 3));
  CHECK_FALSE(kcoral::Process::adopt(pid + 1, std::move(again)).has_value());
  kcoral::UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  CHECK_FALSE(kcoral::Process::adopt(pid, std::move(null)).has_value());
  CHECK_FALSE(kcoral::Process::adopt(pid, kcoral::UniqueFd()).has_value());
  auto held = kcoral::Process::adopt(pid, std::move(pidfd));
  REQUIRE(held.has_value());
  CHECK(held->signal(SIGKILL));
  CHECK(held->wait_for_exit(5s));
}

TEST_CASE("a pidfd of a process already reaped is adopted, and never signals") {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  kcoral::UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  REQUIRE(pidfd.valid());
  ::waitpid(pid, nullptr, 0);  // reaped by its parent, as the worker parent may before the front looks
  auto held = kcoral::Process::adopt(pid, std::move(pidfd));
  REQUIRE(held.has_value());
  CHECK_FALSE(held->signal(0));
  CHECK_FALSE(held->signal_group(SIGKILL));
}

TEST_CASE("a moved-from process holds nothing") {
  auto child = kcoral::Process::open(sleeper());
  REQUIRE(child.has_value());
  kcoral::Process moved = std::move(*child);
  CHECK_FALSE(static_cast<bool>(*child));
  CHECK_FALSE(child->signal(0));
  CHECK(moved.signal(SIGKILL));
  CHECK(moved.wait_for_exit(5s));
}
