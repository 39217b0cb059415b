// Process trees (kcoral-server/process_tree.cpp): children_of reads parents from /proc
// (command names with spaces and parentheses included); kill_descendants kills and reaps
// every child except those kept, and, as a subreaper, the grandchildren they leave.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "process_tree.hpp"

namespace {

// A child that sleeps until killed; with `name`, it renames itself first.
pid_t sleeping_child(const char* name = nullptr) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (name != nullptr) ::prctl(PR_SET_NAME, name);
    for (;;) ::pause();
  }
  return pid;
}

bool contains(const std::vector<pid_t>& pids, pid_t pid) { return std::find(pids.begin(), pids.end(), pid) != pids.end(); }

// Whether `pid` still exists (a zombie counts until reaped).
bool exists(pid_t pid) { return ::kill(pid, 0) == 0; }

// Waits until children_of(getpid()) shows `pid` (a fresh child may rename itself late).
bool eventually_child(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    if (contains(kcoral::children_of(::getpid()), pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

void reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace

TEST_SUITE("process_tree") {

TEST_CASE("children_of lists a forked child, and not after it is reaped") {
  pid_t child = sleeping_child();
  CHECK(eventually_child(child));
  CHECK_FALSE(contains(kcoral::children_of(child), ::getpid()));
  reap(child);
  CHECK_FALSE(contains(kcoral::children_of(::getpid()), child));
}

TEST_CASE("children_of copes with command names holding spaces and parentheses") {
  pid_t child = sleeping_child("a) b (1 2");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(eventually_child(child));
  reap(child);
}

TEST_CASE("children_of of a process without children, or of no process, is empty") {
  pid_t child = sleeping_child();
  CHECK(kcoral::children_of(child).empty());
  reap(child);
  CHECK(kcoral::children_of(-5).empty());
}

TEST_CASE("kill_descendants kills and reaps every child except those kept") {
  pid_t killed_a = sleeping_child();
  pid_t killed_b = sleeping_child();
  pid_t kept = sleeping_child();
  REQUIRE(eventually_child(killed_a));
  REQUIRE(eventually_child(killed_b));
  REQUIRE(eventually_child(kept));
  CHECK(kcoral::kill_descendants({kept}) == 2);
  CHECK_FALSE(exists(killed_a));  // reaped, not left as zombies
  CHECK_FALSE(exists(killed_b));
  CHECK(exists(kept));
  reap(kept);
  CHECK(kcoral::kill_descendants() == 0);
}

TEST_CASE("as a subreaper, kill_descendants also kills the grandchildren an ended child left") {
  kcoral::become_subreaper();
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    pid_t grandchild = ::fork();
    if (grandchild == 0) {
      for (;;) ::pause();
    }
    (void)!::write(pipe_fds[1], &grandchild, sizeof grandchild);
    for (;;) ::pause();
  }
  ::close(pipe_fds[1]);
  pid_t grandchild = -1;
  REQUIRE(::read(pipe_fds[0], &grandchild, sizeof grandchild) == static_cast<ssize_t>(sizeof grandchild));
  ::close(pipe_fds[0]);
  REQUIRE(eventually_child(child));
  CHECK(kcoral::kill_descendants() == 2);
  CHECK_FALSE(exists(child));
  CHECK_FALSE(exists(grandchild));
  CHECK(kcoral::children_of(::getpid()).empty());
}

}  // TEST_SUITE
