// ReuseBaseline: a worker's state captured, and compared, between programs.
#include "reuse_baseline.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

extern char** environ;

namespace kcoral {
namespace {

// The numeric entries of a /proc directory: thread ids, or (`descriptors`) this process's
// descriptors but the one reading the directory.
std::vector<int> numbered_entries(const char* path, bool descriptors) {
  std::vector<int> out;
  DIR* dir = ::opendir(path);
  if (dir == nullptr) return out;
  int own = descriptors ? ::dirfd(dir) : -1;
  while (dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    long number = std::strtol(entry->d_name, &end, 10);
    if (end != entry->d_name && *end == '\0' && number != own) out.push_back(static_cast<int>(number));
  }
  ::closedir(dir);
  return out;
}

// A thread's name as the kernel keeps it (at most 15 bytes), without the newline the kernel
// adds, and with '?' for each byte that is not printable ASCII: the program chose it.
std::string thread_name(int id) {
  std::string path = "/proc/self/task/" + std::to_string(id) + "/comm";
  std::array<char, 64> name{};
  FILE* file = std::fopen(path.c_str(), "re");
  if (file == nullptr) return "?";
  std::size_t size = std::fread(name.data(), 1, name.size(), file);
  std::fclose(file);
  if (size > 0 && name[size - 1] == '\n') --size;
  std::string out(name.data(), size);
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  return out;
}

// The names of the threads in `now` and not in `before`, for the retirement's reason.
std::string new_threads(const std::set<int>& before, const std::set<int>& now) {
  std::string names;
  for (int id : now)
    if (!before.contains(id)) names += (names.empty() ? "" : ", ") + thread_name(id);
  return names.empty() ? std::string() : " (new: " + names + ")";
}

// What a descriptor refers to, as the kernel tells files apart: fstat is a tenth of the
// cost of reading its link in /proc, which only a reason needs.
std::pair<dev_t, ino_t> identity(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return {0, 0};
  return {info.st_dev, info.st_ino};
}

std::string link_target(int fd) {
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  std::array<char, 4096> target{};
  ssize_t size = ::readlink(path.c_str(), target.data(), target.size());
  return size < 0 ? std::string("?") : std::string(target.data(), static_cast<std::size_t>(size));
}

// The first name in `after` and not in `before` (both sorted), else the first gone.
std::string first_change(const std::vector<std::string>& before, const std::vector<std::string>& after) {
  std::vector<std::string> added, removed;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(), std::back_inserter(added));
  if (!added.empty()) return "+" + added.front() + (added.size() > 1 ? " and " + std::to_string(added.size() - 1) + " more" : "");
  std::set_difference(before.begin(), before.end(), after.begin(), after.end(), std::back_inserter(removed));
  if (!removed.empty()) return "-" + removed.front() + (removed.size() > 1 ? " and " + std::to_string(removed.size() - 1) + " more" : "");
  return {};
}

// The variable's name only: its value may be a secret of the tenant's.
std::string variable_change(const std::string& change) {
  std::string name = change.substr(1, change.find('=') - 1);
  return change.starts_with('+') ? name + " set or changed" : name + " unset";
}

// This process's threads, by id.
std::set<int> current_threads() {
  std::vector<int> ids = numbered_entries("/proc/self/task", false);
  return {ids.begin(), ids.end()};
}

std::set<int> without(std::set<int> threads, const std::vector<int>& left_out) {
  for (int id : left_out) threads.erase(id);
  return threads;
}

}  // namespace

ReuseBaseline ReuseBaseline::capture(Executor& executor) { return capture(executor, {}, true); }

ReuseBaseline ReuseBaseline::capture(Executor& executor, const std::set<int>& answer_descriptors, bool with_names) {
  ReuseBaseline state;
  state.threads_ = current_threads();
  for (int fd : numbered_entries("/proc/self/fd", true))
    if (!answer_descriptors.contains(fd)) state.descriptors_.emplace(fd, identity(fd));
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) state.environment_.emplace_back(*entry);
  std::sort(state.environment_.begin(), state.environment_.end());
  state.interpreter_ = executor.interpreter_state(with_names);
  return state;
}

std::optional<std::string> ReuseBaseline::departure_now(Executor& executor, const std::set<int>& answer_descriptors,
                                                        std::chrono::milliseconds settle,
                                                        const std::vector<int>& tool_threads) const {
  // The tool's threads are in neither count, whether they started before the baseline or after.
  std::set<int> before = without(threads_, tool_threads);
  ReuseBaseline now = capture(executor, answer_descriptors, false);
  now.threads_ = without(std::move(now.threads_), tool_threads);
  auto deadline = std::chrono::steady_clock::now() + settle;
  while (now.threads_.size() != before.size() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    now.threads_ = without(current_threads(), tool_threads);
  }
  if (now.interpreter_.readable && !interpreter_.same_modules(now.interpreter_))
    now.interpreter_ = executor.interpreter_state(true);  // to say which
  return departure(now, before);
}

std::optional<std::string> ReuseBaseline::departure(const ReuseBaseline& now, const std::set<int>& threads_before) const {
  // Counted, not matched by id: a pool may replace a thread it retired with another.
  if (now.threads_.size() != threads_before.size())
    return "threads: " + std::to_string(now.threads_.size()) + " after the program, " +
           std::to_string(threads_before.size()) + " before" + new_threads(threads_before, now.threads_);
  if (now.descriptors_ != descriptors_) {
    for (const auto& [fd, file] : now.descriptors_) {
      auto was = descriptors_.find(fd);
      if (was == descriptors_.end()) return "descriptors: " + std::to_string(fd) + " (" + link_target(fd) + ") left open";
      if (was->second != file) return "descriptors: " + std::to_string(fd) + " now refers to " + link_target(fd);
    }
    return "descriptors: one the worker had was closed";
  }
  if (now.environment_ != environment_)
    return "environment: " + variable_change(first_change(environment_, now.environment_));
  if (!now.interpreter_.readable) return "imported modules: the interpreter could not list them";
  if (!interpreter_.same_modules(now.interpreter_)) {
    std::string change = first_change(interpreter_.modules, now.interpreter_.modules);
    return "imported modules: " + (change.empty() ? "a key that is not a string" : change);
  }
  if (now.interpreter_.gpu_bytes != interpreter_.gpu_bytes)
    return "GPU memory: torch holds " + std::to_string(now.interpreter_.gpu_bytes) + " bytes, " +
           std::to_string(interpreter_.gpu_bytes) + " before";
  return std::nullopt;
}

}  // namespace kcoral
