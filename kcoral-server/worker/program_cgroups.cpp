// ProgramCgroups through the control group file systems: mkdir and rmdir of directories,
// one value per control file, and on v1 the memory controller's OOM notification
// (an eventfd registered in cgroup.event_control against memory.oom_control).
#include "program_cgroups.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace kcoral {
namespace {

// The child of a v2 group that takes the group's own processes (see the header).
constexpr const char* kLeaf = "kcoral-leaf";
// Equal for every program: v1's and v2's defaults, written so that nothing else decides.
constexpr const char* kCpuShares = "1024";
constexpr const char* kCpuWeight = "100";
// A group given back goes to the reclaimer when it holds more than this beyond its shared
// memory. The reclaimer is sent kMostSent groups at a time; the others wait their turn,
// kMostWaiting groups in all (each holds a descriptor on v1), past which one is removed.
constexpr std::uint64_t kReclaimAbove = 32 << 20;
constexpr std::size_t kMostSent = 16;
constexpr std::size_t kMostWaiting = 64;

std::string errno_text(int error) { return std::strerror(error); }

// Writes `text` to a control file in one write(2), as the kernel expects; the errno of a
// refusal is kept for the caller.
Status write_control(const std::string& path, const std::string& text, int* error = nullptr) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  bool written = fd && ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (written) return {};
  int saved = errno;
  if (error != nullptr) *error = saved;
  return fail(ErrorKind::engine, "writing '" + text + "' to " + path + ": " + errno_text(saved));
}

std::string read_control(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::set<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::set<std::string> found;
  for (std::string word; in >> word;) found.insert(word);
  return found;
}

// The value of `key` in a flat keyed file ("oom_kill 3").
std::uint64_t keyed_value(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string name; in >> name;) {
    std::uint64_t value = 0;
    if (!(in >> value)) return 0;
    if (name == key) return value;
  }
  return 0;
}

Status make_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return {};
  return fail(ErrorKind::engine, "creating " + path + ": " + errno_text(errno));
}

// Removes the groups below `group` that are empty, deepest first (a fork helper's group
// holds its programs' groups): one with processes in it fails to go, and stays.
void remove_empty_below(const std::string& group) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(group, error))
    if (entry.is_directory(error) && !entry.is_symlink(error)) {
      remove_empty_below(entry.path());
      (void)::rmdir(entry.path().c_str());
    }
}

// Removes a group's directory; processes still in it are killed first (a group with
// processes cannot be removed), for at most about a second. Empty groups below it go too:
// a server's group holds what a fork helper that was killed left.
void remove_group(const std::string& directory) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    if (::rmdir(directory.c_str()) == 0 || errno == ENOENT) return;
    if (errno != EBUSY) return;
    remove_empty_below(directory);
    if (::rmdir(directory.c_str()) == 0) return;
    if (attempt == 0 && write_control(directory + "/cgroup.kill", "1")) continue;  // v2, 5.14 and later
    std::istringstream pids(read_control(directory + "/cgroup.procs"));
    for (long pid; pids >> pid;)
      if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// The server's own group, made or found. Found, it is most likely a killed server's of the
// same process id, whose groups nobody removed: its empty program groups go, or this
// server's first program group would collide with one of them. A group with processes in
// it stays (another server of this id, in another PID namespace, may be using it), and
// the collision is then reported when a worker needs the group.
Status make_server_group(const std::string& path) {
  if (auto made = make_directory(path); !made) return made;
  remove_empty_below(path);
  return {};
}

std::string parent_of(const std::string& directory) { return directory.substr(0, directory.rfind('/')); }
std::string base_name(const std::string& directory) { return directory.substr(directory.rfind('/') + 1); }

// v2: the group whose children the server groups are, for a process in `own`: a group
// named kcoral-leaf holds the processes a server moved there, and its parent gives the
// controllers.
std::string v2_server_parent(const std::string& own) { return base_name(own) == kLeaf ? parent_of(own) : own; }

// Where create() puts the server group `name` for a process in `layout`'s groups: one
// directory per hierarchy.
std::set<std::string> server_group_directories(const CgroupLayout& layout, const std::string& name) {
  std::set<std::string> directories;
  if (layout.version == CgroupVersion::v1) {
    for (std::string_view controller : kProgramControllers)
      if (auto own = layout.directories.find(std::string(controller)); own != layout.directories.end())
        directories.insert(own->second + "/" + name);
  } else if (!layout.directories.empty()) {
    directories.insert(v2_server_parent(layout.directories.begin()->second) + "/" + name);
  }
  return directories;
}

// v2: moves the processes of `group` into its child kcoral-leaf, so that `group` may give
// controllers to its children. Processes that appear meanwhile are moved on the next round.
Status move_processes_to_leaf(const std::string& group, std::size_t& moved) {
  std::string leaf = group + "/" + kLeaf;
  if (auto made = make_directory(leaf); !made) return made;
  for (int round = 0; round < 10; ++round) {
    std::istringstream pids(read_control(group + "/cgroup.procs"));
    bool any = false;
    for (std::string pid; pids >> pid;) {
      any = true;
      int error = 0;
      if (write_control(leaf + "/cgroup.procs", pid, &error)) ++moved;
      else if (error != ESRCH) return fail(ErrorKind::engine, "moving process " + pid + " into " + leaf + ": " +
                                                                  errno_text(error));
    }
    if (!any) return {};
  }
  return fail(ErrorKind::engine, "processes keep appearing in " + group);
}

// v2: gives the `wanted` controllers to the children of `group`; returns those it could,
// and notes why the others failed.
std::vector<std::string> enable_for_children(const std::string& group, const std::vector<std::string>& wanted,
                                             std::vector<std::string>& notes, bool may_move) {
  std::vector<std::string> enabled;
  std::set<std::string> already = words(read_control(group + "/cgroup.subtree_control"));
  for (const std::string& controller : wanted) {
    if (already.contains(controller)) {
      enabled.push_back(controller);
      continue;
    }
    int error = 0;
    auto written = write_control(group + "/cgroup.subtree_control", "+" + controller, &error);
    if (!written && error == EBUSY && may_move) {
      std::size_t moved = 0;
      if (auto status = move_processes_to_leaf(group, moved); !status) {
        notes.push_back(status.error().message);
        return enabled;
      }
      notes.push_back("moved the " + std::to_string(moved) + " processes of " + group + " into " + group + "/" +
                      kLeaf + " (a v2 group that holds processes cannot give controllers to its children)");
      may_move = false;
      written = write_control(group + "/cgroup.subtree_control", "+" + controller, &error);
    }
    if (written) enabled.push_back(controller);
    else notes.push_back("no " + controller + " controller: " + written.error().message);
  }
  return enabled;
}

}  // namespace

// -- ProgramCgroup ----------------------------------------------------------------------------

ProgramCgroup::ProgramCgroup(ProgramCgroup&& other) noexcept
    : version_(other.version_),
      directories_(std::exchange(other.directories_, {})),
      memory_directory_(std::exchange(other.memory_directory_, {})),
      memory_events_(std::move(other.memory_events_)),
      memory_limit_(other.memory_limit_),
      oom_kills_before_(other.oom_kills_before_) {}

ProgramCgroup& ProgramCgroup::operator=(ProgramCgroup&& other) noexcept {
  if (this != &other) {
    remove();
    version_ = other.version_;
    directories_ = std::exchange(other.directories_, {});
    memory_directory_ = std::exchange(other.memory_directory_, {});
    memory_events_ = std::move(other.memory_events_);
    memory_limit_ = other.memory_limit_;
    oom_kills_before_ = other.oom_kills_before_;
  }
  return *this;
}

ProgramCgroup::~ProgramCgroup() { remove(); }

void ProgramCgroup::remove() {
  memory_events_.reset();  // before the group goes: its removal would signal the event
  for (const std::string& directory : directories_) remove_group(directory);
  forget();
}

void ProgramCgroup::forget() {
  memory_events_.reset();
  directories_.clear();
  memory_directory_.clear();
}

bool ProgramCgroup::empty() const {
  return std::all_of(directories_.begin(), directories_.end(), [](const std::string& directory) {
    std::string members = read_control(directory + "/cgroup.procs");
    return members.find_first_not_of(" \n") == std::string::npos;
  });
}

Status ProgramCgroup::write_memory_limit(std::uint64_t bytes) {
  if (version_ == CgroupVersion::v2) {
    KCORAL_TRY(write_control(memory_directory_ + "/memory.max", std::to_string(bytes)));
  } else {
    // Memory and swap together no more than memory alone: no swap. The kernel keeps the
    // first at least the second, so a limit is raised there first and lowered there last
    // (absent without swap accounting, and then there is nothing to bound).
    std::string swap = memory_directory_ + "/memory.memsw.limit_in_bytes";
    bool has_swap = exists(swap);
    bool raising = memory_limit_ != 0 && bytes > memory_limit_;  // 0: none yet, the kernel's maximum
    if (has_swap && raising) KCORAL_TRY(write_control(swap, std::to_string(bytes)));
    KCORAL_TRY(write_control(memory_directory_ + "/memory.limit_in_bytes", std::to_string(bytes)));
    if (has_swap && !raising) KCORAL_TRY(write_control(swap, std::to_string(bytes)));
  }
  memory_limit_ = bytes;
  return {};
}

std::uint64_t ProgramCgroup::held_bytes() const {
  auto number = [&](const char* file) {
    std::uint64_t value = 0;
    std::istringstream(read_control(memory_directory_ + file)) >> value;
    return value;
  };
  if (version_ == CgroupVersion::v2) return number("/memory.current");  // its groups may not swap
  return std::max(number("/memory.usage_in_bytes"), number("/memory.memsw.usage_in_bytes"));
}

std::uint64_t ProgramCgroup::shared_bytes() const {
  std::string stat = read_control(memory_directory_ + "/memory.stat");
  return keyed_value(stat, "shmem") + keyed_value(stat, "swap");
}

Status ProgramCgroup::prepare(std::uint64_t limit_bytes) {
  if (memory_directory_.empty()) return {};
  (void)take_memory_event();
  oom_kills_before_ = oom_kill_count();
  if (limit_bytes == 0) return {};
  // The group holds no process; what it still holds, earlier programs left (reclaimed
  // already where there was much that could be).
  return write_memory_limit(limit_bytes + held_bytes());
}

Status ProgramCgroup::join(pid_t pid) const {
  for (const std::string& directory : directories_)
    if (auto written = write_control(directory + "/cgroup.procs", std::to_string(pid)); !written) return written;
  return {};
}

std::uint64_t ProgramCgroup::oom_kill_count() const {
  if (memory_directory_.empty()) return 0;
  const char* file = version_ == CgroupVersion::v1 ? "/memory.oom_control" : "/memory.events";
  return keyed_value(read_control(memory_directory_ + file), "oom_kill");
}

std::uint64_t ProgramCgroup::oom_kills() const { return oom_kill_count() - oom_kills_before_; }

bool ProgramCgroup::take_memory_event() const {
  std::uint64_t count = 0;
  return memory_events_ && ::read(memory_events_.get(), &count, sizeof count) == sizeof count && count > 0;
}

// -- ProgramCgroups ---------------------------------------------------------------------------

ProgramCgroups::ProgramCgroups(ProgramCgroups&& other) noexcept
    : version_(other.version_),
      directories_(std::exchange(other.directories_, {})),
      controllers_(std::exchange(other.controllers_, {})),
      notes_(std::exchange(other.notes_, {})),
      limits_(other.limits_),
      kept_(std::exchange(other.kept_, {})),
      reclaiming_(std::exchange(other.reclaiming_, {})),
      sent_(std::exchange(other.sent_, 0)),
      reclaimer_(std::move(other.reclaimer_)),
      made_(other.made_) {}

ProgramCgroups& ProgramCgroups::operator=(ProgramCgroups&& other) noexcept {
  if (this != &other) {
    remove();
    version_ = other.version_;
    directories_ = std::exchange(other.directories_, {});
    controllers_ = std::exchange(other.controllers_, {});
    notes_ = std::exchange(other.notes_, {});
    limits_ = other.limits_;
    kept_ = std::exchange(other.kept_, {});
    reclaiming_ = std::exchange(other.reclaiming_, {});
    sent_ = std::exchange(other.sent_, 0);
    reclaimer_ = std::move(other.reclaimer_);
    made_ = other.made_;
  }
  return *this;
}

ProgramCgroups::~ProgramCgroups() { remove(); }

void ProgramCgroups::remove_left(const CgroupLayout& layout, const std::string& name) {
  for (const std::string& group : server_group_directories(layout, name)) {
    remove_empty_below(group);
    (void)::rmdir(group.c_str());
  }
}

Result<ProgramCgroups> ProgramCgroups::make_inner(const std::string& name) const {
  CgroupLayout layout{version_, {}};
  for (const std::string& controller : controllers_)
    layout.directories.emplace(controller, directories_.at(controller));
  return create(layout, name, limits_);
}

void ProgramCgroups::disown() {
  for (ProgramCgroup& group : kept_) group.forget();
  for (ProgramCgroup& group : reclaiming_) group.forget();
  kept_.clear();
  reclaiming_.clear();
  sent_ = 0;
  reclaimer_.forget();
  directories_.clear();
  controllers_.clear();
}

void ProgramCgroups::remove() {
  reclaimer_ = GroupReclaimer();  // ended first: it may be writing to a group's files
  reclaiming_.clear();            // the programs' groups, inside the server's
  sent_ = 0;
  kept_.clear();
  std::set<std::string> removed;
  for (const auto& [controller, directory] : directories_)
    if (removed.insert(directory).second) remove_group(directory);
  directories_.clear();
}

Result<ProgramCgroups> ProgramCgroups::create(const CgroupLayout& layout, const std::string& name,
                                              ProgramCgroupLimits limits) {
  ProgramCgroups groups;
  groups.version_ = layout.version;
  groups.limits_ = limits;
  if (layout.version == CgroupVersion::v1) {
    for (std::string_view wanted : kProgramControllers) {
      std::string controller(wanted);
      auto own = layout.directories.find(controller);
      if (own == layout.directories.end()) {
        groups.notes_.push_back("no " + controller + " hierarchy is mounted");
        continue;
      }
      std::string directory = own->second + "/" + name;
      if (auto made = make_server_group(directory); !made) {
        groups.notes_.push_back("no " + controller + " controller: " + made.error().message);
        continue;
      }
      groups.directories_.emplace(controller, directory);
      groups.controllers_.push_back(controller);
    }
  } else {
    std::string own = v2_server_parent(layout.directories.begin()->second);
    std::set<std::string> available = words(read_control(own + "/cgroup.controllers"));
    std::vector<std::string> wanted;
    for (std::string_view controller : kProgramControllers) {
      if (available.contains(std::string(controller))) wanted.emplace_back(controller);
      else groups.notes_.push_back("no " + std::string(controller) + " controller in " + own);
    }
    std::vector<std::string> enabled = enable_for_children(own, wanted, groups.notes_, true);
    std::string directory = own + "/" + name;
    if (!enabled.empty()) {
      if (auto made = make_server_group(directory); !made) {
        groups.notes_.push_back(made.error().message);
        enabled.clear();
      } else {
        groups.directories_.emplace("", directory);  // removed with the rest
        enabled = enable_for_children(directory, enabled, groups.notes_, false);
      }
    }
    for (const std::string& controller : enabled) {
      groups.directories_.emplace(controller, directory);
      groups.controllers_.push_back(controller);
    }
  }
  if (groups.controllers_.empty()) {
    std::string why;
    for (const std::string& note : groups.notes_) why += (why.empty() ? "" : "; ") + note;
    return fail(ErrorKind::engine, why.empty() ? "no control group controller can be used" : why);
  }
  return groups;
}

Result<ProgramCgroup> ProgramCgroups::make(const std::string& name) const {
  ProgramCgroup group;
  group.version_ = version_;
  // The directories first, so that a failure part way removes what was made.
  std::map<std::string, std::string> made;  // server group directory -> the program's
  for (const std::string& controller : controllers_) {
    const std::string& parent = directories_.at(controller);
    if (made.contains(parent)) continue;
    std::string directory = parent + "/" + name;
    if (::mkdir(directory.c_str(), 0755) != 0)
      return fail(ErrorKind::engine, "creating the control group " + directory + ": " + errno_text(errno));
    made.emplace(parent, directory);
    group.directories_.push_back(directory);
  }
  bool v1 = version_ == CgroupVersion::v1;
  for (const std::string& controller : controllers_) {
    const std::string& directory = made.at(directories_.at(controller));
    Status written;
    if (controller == "memory" && limits_.memory_bytes > 0) {
      // The group is new and empty, so no usage to hold the limit against here; what a
      // worker holds when it starts is checked against its per-process limit instead
      // (check_memory_limit in sandbox.cpp, which says why that is the one to check).
      group.memory_directory_ = directory;
      written = group.write_memory_limit(limits_.memory_bytes);
      if (written && !v1 && exists(directory + "/memory.swap.max"))
        written = write_control(directory + "/memory.swap.max", "0");
      if (written && !v1) written = write_control(directory + "/memory.oom.group", "1");
    } else if (controller == "memory") {
      group.memory_directory_ = directory;
    } else if (controller == "pids" && limits_.processes > 0) {
      written = write_control(directory + "/pids.max", std::to_string(limits_.processes));
    } else if (controller == "cpu") {
      written = v1 ? write_control(directory + "/cpu.shares", kCpuShares)
                   : write_control(directory + "/cpu.weight", kCpuWeight);
    }
    if (!written) return std::unexpected(written.error());
  }
  if (v1 && !group.memory_directory_.empty()) {
    UniqueFd events(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    UniqueFd oom_control(::open((group.memory_directory_ + "/memory.oom_control").c_str(), O_RDONLY | O_CLOEXEC));
    if (!events || !oom_control)
      return fail(ErrorKind::engine, "the OOM notification of " + group.memory_directory_ + ": " + errno_text(errno));
    if (auto registered = write_control(group.memory_directory_ + "/cgroup.event_control",
                                        std::to_string(events.get()) + " " + std::to_string(oom_control.get()));
        !registered)
      return std::unexpected(registered.error());
    group.memory_events_ = std::move(events);
  }
  return group;
}

Result<ProgramCgroup> ProgramCgroups::take() {
  while (!kept_.empty()) {
    ProgramCgroup group = std::move(kept_.back());
    kept_.pop_back();
    if (group.prepare(limits_.memory_bytes)) return group;
  }  // a group that could not be prepared is removed as it goes
  return make("program-" + std::to_string(++made_));
}

void ProgramCgroups::give_back(ProgramCgroup group) {
  if (group.directories_.empty() || !group.empty()) return;  // removed as it goes
  if (group.memory_directory_.empty()) {
    kept_.push_back(std::move(group));
    return;
  }
  std::uint64_t held = group.held_bytes();
  if (held <= kReclaimAbove || held <= group.shared_bytes() + kReclaimAbove) {  // little to reclaim
    kept_.push_back(std::move(group));
  } else if (reclaiming_.size() < kMostWaiting) {
    reclaiming_.push_back(std::move(group));
    send_to_reclaimer();
  }  // else removed: the kernel moves its kernel objects to the parent group (cache pages
     // it holds keep it in the kernel while they live)
}

void ProgramCgroups::send_to_reclaimer() {
  while (sent_ < std::min(reclaiming_.size(), kMostSent) &&
         reclaimer_.send(reclaiming_[sent_].memory_directory_, version_ == CgroupVersion::v1))
    ++sent_;
}

void ProgramCgroups::reclaimed() {
  for (const std::string& directory : reclaimer_.done()) {
    auto sent_end = reclaiming_.begin() + static_cast<std::ptrdiff_t>(sent_);
    auto group = std::find_if(reclaiming_.begin(), sent_end,
                              [&](const ProgramCgroup& g) { return g.memory_directory_ == directory; });
    if (group == sent_end) continue;
    kept_.push_back(std::move(*group));
    reclaiming_.erase(group);
    --sent_;
  }
  if (!reclaimer_.running()) {
    // It ended (it never does on its own): the groups it had are removed, so that none that
    // ends it can end the next one; those waiting go to the next.
    reclaiming_.erase(reclaiming_.begin(), reclaiming_.begin() + static_cast<std::ptrdiff_t>(sent_));
    sent_ = 0;
  }
  send_to_reclaimer();
}

std::string ProgramCgroups::directory(const std::string& controller) const {
  auto found = directories_.find(controller);
  return found == directories_.end() || controller.empty() ? std::string() : found->second;
}

std::string ProgramCgroups::description() const {
  std::string text = std::string("cgroup ") + (version_ == CgroupVersion::v1 ? "v1" : "v2") + " (";
  for (std::size_t i = 0; i < controllers_.size(); ++i) text += (i > 0 ? ", " : "") + controllers_[i];
  text += ") under ";
  std::set<std::string> shown;
  for (const std::string& controller : controllers_) {
    const std::string& directory = directories_.at(controller);
    if (shown.insert(directory).second) text += (shown.size() > 1 ? ", " : "") + directory;
  }
  for (const std::string& note : notes_) text += "; " + note;
  return text;
}

}  // namespace kcoral
