// For the sandbox tests: running a part of a test in a child process (a sandbox changes the
// process that sets it up: its namespaces, limits and descriptors), whose findings come
// back as "name=value" lines, and whether this machine lets a sandbox be made at all.
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>

namespace kcoral::test {

// What a child found, by name, and how it ended.
struct ChildReport {
  std::string text;  // the report as written, for a failure's message
  std::map<std::string, std::string> found;
  int exit_code = -1;  // -1: killed, or it did not end in time
  [[nodiscard]] std::string operator[](const std::string& name) const {
    auto it = found.find(name);
    return it == found.end() ? "(not reported)" : it->second;
  }
};

// A "name=value" line on `fd` (values are one line; a newline in one ends it early).
inline void report(int fd, const std::string& name, const std::string& value) {
  std::string line = name + "=" + value.substr(0, value.find('\n')) + "\n";
  (void)!::write(fd, line.data(), line.size());
}

// Runs `body(report_fd)` in a forked child (which exits 0 after it, unless it exits
// itself) and gathers its report until every holder of report_fd has closed it, for at
// most 30 seconds.
inline ChildReport in_child(const std::function<void(int)>& body) {
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(pipe_fds[0]);
    body(pipe_fds[1]);
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd readable{pipe_fds[0], POLLIN, 0};
    if (::poll(&readable, 1, 100) != 1) continue;
    char buffer[4096];
    ssize_t n = ::read(pipe_fds[0], buffer, sizeof buffer);
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(pipe_fds[0]);
  ChildReport result;
  result.text = text;
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);  // it overran: reported as killed
    ::waitpid(pid, &status, 0);
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    std::string line = text.substr(at, end - at);
    auto equals = line.find('=');
    if (equals != std::string::npos) result.found[line.substr(0, equals)] = line.substr(equals + 1);
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return result;
}

// Whether a sandbox can be made here: the server's user is root (the sandbox's ids and
// maps, as tested, are a root server's), and a child may make the namespaces a worker
// makes (mount, PID, IPC, network, UTS, then user and cgroup) and mount a tmpfs. When
// not, says why on stderr once, and the tests that need it are skipped.
inline bool sandbox_possible() {
  static const bool possible = [] {
    std::string why;
    if (::geteuid() != 0) {
      why = "the tests do not run as root";
    } else {
      pid_t pid = ::fork();
      if (pid == 0) {
        if (::unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS) != 0) ::_exit(1);
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(2);
        if (::mount("tmpfs", "/tmp", "tmpfs", 0, "size=1m") != 0) ::_exit(2);
        if (::unshare(CLONE_NEWUSER) != 0) ::_exit(3);
        if (::unshare(CLONE_NEWCGROUP) != 0) ::_exit(4);
        ::_exit(0);
      }
      int status = 0;
      ::waitpid(pid, &status, 0);
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      if (code == 1) why = "no PID, mount, IPC, network or UTS namespaces";
      else if (code == 2) why = "mounts are refused";
      else if (code == 3) why = "user namespaces are not allowed";
      else if (code == 4) why = "no cgroup namespaces";
      else if (code != 0) why = "the namespace probe crashed";
    }
    if (!why.empty()) std::fprintf(stderr, "the sandbox tests that make namespaces are skipped: %s\n", why.c_str());
    return why.empty();
  }();
  return possible;
}

}  // namespace kcoral::test
