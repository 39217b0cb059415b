// Process trees through /proc/<pid>/stat and PR_SET_CHILD_SUBREAPER.
#include "process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "kcoral/read_to_end.hpp"

namespace kcoral {

// From /proc/<pid>/stat, with plain read(2) (the process may be gone by the time it is
// read: no stream that could throw). The command name in parentheses may hold spaces,
// so parse from the last ')'.
pid_t parent_of(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[1024];
  ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  const char* close = std::strrchr(text, ')');
  if (close == nullptr || close + 4 >= text + n) return -1;
  // After ") " come the state and then the parent pid.
  return static_cast<pid_t>(std::strtol(close + 4, nullptr, 10));
}

namespace {

// From /proc/<pid>/task/<tid>/children (one file per thread of the parent); nullopt when
// the kernel does not provide those files.
std::optional<std::vector<pid_t>> children_from_task_files(pid_t parent) {
  std::string tasks = "/proc/" + std::to_string(parent) + "/task";
  DIR* directory = ::opendir(tasks.c_str());
  if (directory == nullptr) return std::nullopt;
  std::vector<pid_t> children;
  bool found = false;
  while (dirent* entry = ::readdir(directory)) {
    if (entry->d_name[0] == '.') continue;
    std::string path = tasks + "/" + entry->d_name + "/children";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    found = true;
    std::string text = read_to_end(fd);
    ::close(fd);
    for (const char* cursor = text.c_str(); *cursor != '\0';) {
      char* end = nullptr;
      long pid = std::strtol(cursor, &end, 10);
      if (end == cursor) break;
      children.push_back(static_cast<pid_t>(pid));
      cursor = end;
    }
  }
  ::closedir(directory);
  if (!found) return std::nullopt;
  return children;
}

std::vector<pid_t> children_from_scan(pid_t parent) {
  std::vector<pid_t> children;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    if (parent_of(static_cast<pid_t>(pid)) == parent) children.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return children;
}

}  // namespace

std::vector<pid_t> children_of(pid_t parent) {
  if (auto children = children_from_task_files(parent)) return *children;
  return children_from_scan(parent);
}

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

int kill_descendants(const std::vector<pid_t>& keep) {
  int killed = 0;
  const pid_t self = ::getpid();
  for (int round = 0; round < 200; ++round) {
    std::vector<pid_t> children = children_of(self);
    std::erase_if(children, [&](pid_t pid) { return std::find(keep.begin(), keep.end(), pid) != keep.end(); });
    if (children.empty()) break;
    for (pid_t pid : children) {
      ::kill(pid, SIGKILL);
      ++killed;
    }
    // Reap them, in whatever order they end: a PID namespace's init, for one, ends only
    // once the other processes of its namespace are reaped. Their own children now
    // belong to us and are found next round.
    while (!children.empty()) {
      std::erase_if(children, [](pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) != 0; });
      if (!children.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return killed;
}

}  // namespace kcoral
