// CompileCaches: the tenants' tmpfs caches, their mounts into workers, and their eviction.
#include "compile_caches.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>

#include "kcoral/remove_tree.hpp"
#include "kcoral/wait.hpp"
#include "mount_calls.hpp"
#include "sandbox_layout.hpp"

namespace kcoral {
namespace {

constexpr std::uint64_t kBytesPerInode = 16384;
// Deeper than this, a tree is read no further for its access times, and cut off (moved up
// to the top level) to be removed.
constexpr std::size_t kMaxDepth = 64;
constexpr std::int64_t kKeepNewerThanSeconds = 30;
constexpr std::chrono::seconds kTrimEvery{1};

std::uint64_t inodes_for(std::uint64_t bytes) { return std::max<std::uint64_t>(1024, bytes / kBytesPerInode); }

// -- reading and removing a tree without following links ---------------------------------

constexpr int kOpenDirectory = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC;

struct OpenDirectory {
  DIR* dir = nullptr;
  std::string name;  // in its parent
  explicit OpenDirectory(int fd, std::string name_in_parent) : dir(::fdopendir(fd)), name(std::move(name_in_parent)) {
    if (dir == nullptr) ::close(fd);
  }
  OpenDirectory(OpenDirectory&& other) noexcept : dir(std::exchange(other.dir, nullptr)), name(std::move(other.name)) {}
  OpenDirectory& operator=(OpenDirectory&&) = delete;
  ~OpenDirectory() {
    if (dir != nullptr) ::closedir(dir);
  }
  [[nodiscard]] int fd() const { return ::dirfd(dir); }
};

bool is_dot(const char* name) { return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0')); }

// What one eviction may still read and remove, in entries: a tree that running programs
// keep changing under it (a directory renamed ahead of the walk each time it is opened,
// files made as fast as they go) would otherwise keep it going for as long as they like.
struct Budget {
  std::uint64_t entries;
  bool take() {
    if (entries == 0) return false;
    --entries;
    return true;
  }
};

// An entry's last use; one dated more than a minute after `now` (utime sets any time; the
// file system's clock and `now`'s may differ by a tick) counts as the oldest, so that no
// entry can be kept from eviction by its dates.
std::int64_t last_used(const struct stat& info, std::int64_t now) {
  std::int64_t used = std::max<std::int64_t>(info.st_atime, info.st_mtime);
  return used > now + 60 ? 0 : used;
}

// The entry's newest use in the tree at `name` under `parent` (to kMaxDepth); nullopt: the
// budget ran out before the tree was read.
std::optional<std::int64_t> newest_in(int parent, const std::string& name, dev_t device, std::int64_t now,
                                      Budget& budget) {
  struct stat info {};
  if (!budget.take()) return std::nullopt;
  if (::fstatat(parent, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) return 0;
  std::int64_t newest = last_used(info, now);
  if (!S_ISDIR(info.st_mode) || info.st_dev != device) return newest;
  std::vector<OpenDirectory> stack;
  int fd = ::openat(parent, name.c_str(), kOpenDirectory);
  if (fd < 0) return newest;
  stack.emplace_back(fd, name);
  while (!stack.empty()) {
    if (stack.back().dir == nullptr) {
      stack.pop_back();
      continue;
    }
    errno = 0;
    dirent* entry = ::readdir(stack.back().dir);
    if (entry == nullptr) {
      stack.pop_back();
      continue;
    }
    if (is_dot(entry->d_name)) continue;
    if (!budget.take()) return std::nullopt;
    int at = stack.back().fd();
    if (::fstatat(at, entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    newest = std::max(newest, last_used(info, now));
    if (S_ISDIR(info.st_mode) && info.st_dev == device && stack.size() < kMaxDepth)
      if (int child = ::openat(at, entry->d_name, kOpenDirectory); child >= 0) stack.emplace_back(child, entry->d_name);
  }
  return newest;
}

// Removes the tree at `name` under `parent`, or as much of it as the budget allows. A
// directory deeper than kMaxDepth below it is moved to `top` (the cache's root) under a
// name of `cut_off`'s, to be removed in turn.
void remove_entry(int parent, const std::string& name, int top, dev_t device, std::vector<std::string>& cut_off,
                  Budget& budget) {
  if (!budget.take()) return;
  if (::unlinkat(parent, name.c_str(), 0) == 0 || errno != EISDIR) return;
  std::vector<OpenDirectory> stack;
  int fd = ::openat(parent, name.c_str(), kOpenDirectory);
  if (fd < 0) return;
  stack.emplace_back(fd, name);
  while (!stack.empty()) {
    if (stack.back().dir == nullptr) {
      stack.pop_back();
      continue;
    }
    dirent* entry = ::readdir(stack.back().dir);
    if (entry == nullptr) {
      std::string done = stack.back().name;
      stack.pop_back();
      ::unlinkat(stack.empty() ? parent : stack.back().fd(), done.c_str(), AT_REMOVEDIR);
      continue;
    }
    if (is_dot(entry->d_name)) continue;
    if (!budget.take()) return;
    int at = stack.back().fd();
    if (::unlinkat(at, entry->d_name, 0) == 0 || errno != EISDIR) continue;
    struct stat info {};
    if (::fstatat(at, entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0 || info.st_dev != device) continue;
    if (stack.size() >= kMaxDepth) {
      static unsigned serial = 0;
      std::string moved = ".kcoral-cut-" + std::to_string(::getpid()) + "-" + std::to_string(++serial);
      if (::renameat(at, entry->d_name, top, moved.c_str()) == 0) cut_off.push_back(std::move(moved));
      continue;
    }
    if (int child = ::openat(at, entry->d_name, kOpenDirectory); child >= 0) stack.emplace_back(child, entry->d_name);
  }
}

struct Entry {
  std::string parent;  // the top-level directory holding it; empty: the root
  std::string name;
  std::int64_t newest = 0;
};

// The entries whose newest use was read within the budget.
std::vector<Entry> entries_of(int root, dev_t device, std::int64_t now, Budget& budget) {
  std::vector<Entry> entries;
  int fd = ::openat(root, ".", kOpenDirectory);
  if (fd < 0) return entries;
  OpenDirectory top(fd, ".");
  if (top.dir == nullptr) return entries;
  while (dirent* entry = ::readdir(top.dir)) {
    if (is_dot(entry->d_name)) continue;
    if (!budget.take()) break;
    struct stat info {};
    if (::fstatat(top.fd(), entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISDIR(info.st_mode) || info.st_dev != device || std::strncmp(entry->d_name, ".kcoral-cut-", 12) == 0) {
      if (auto newest = newest_in(top.fd(), entry->d_name, device, now, budget))
        entries.push_back({"", entry->d_name, *newest});
      continue;
    }
    int inner_fd = ::openat(top.fd(), entry->d_name, kOpenDirectory);
    if (inner_fd < 0) continue;
    OpenDirectory inner(inner_fd, entry->d_name);
    if (inner.dir == nullptr) continue;
    while (dirent* child = ::readdir(inner.dir)) {
      if (is_dot(child->d_name)) continue;
      auto newest = newest_in(inner.fd(), child->d_name, device, now, budget);
      if (!newest) return entries;
      entries.push_back({entry->d_name, child->d_name, *newest});
    }
  }
  return entries;
}

}  // namespace

std::size_t evict_least_recent(int directory, std::uint64_t target_bytes, std::uint64_t target_inodes,
                               const std::function<CacheUsage()>& usage, std::int64_t now_seconds,
                               std::int64_t keep_newer_than, std::uint64_t max_entries) {
  auto over = [&] {
    CacheUsage used = usage();
    return used.bytes > target_bytes || used.inodes > target_inodes;
  };
  if (!over()) return 0;
  struct stat root_info {};
  if (::fstat(directory, &root_info) != 0) return 0;
  // Half the entries to read the tree's times, the rest (and what reading left) to remove.
  Budget budget{max_entries / 2};
  std::vector<Entry> entries = entries_of(directory, root_info.st_dev, now_seconds, budget);
  budget.entries += max_entries - max_entries / 2;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.newest < b.newest; });
  std::size_t removed = 0;
  std::vector<std::string> cut_off;
  for (const Entry& entry : entries) {
    if (!over() || entry.newest > now_seconds - keep_newer_than || budget.entries == 0) break;
    int parent = directory;
    UniqueFd inner;
    if (!entry.parent.empty()) {
      inner = UniqueFd(::openat(directory, entry.parent.c_str(), kOpenDirectory));
      if (!inner) continue;
      parent = inner.get();
    }
    remove_entry(parent, entry.name, directory, root_info.st_dev, cut_off, budget);
    while (!cut_off.empty()) {
      std::string next = std::move(cut_off.back());
      cut_off.pop_back();
      remove_entry(directory, next, directory, root_info.st_dev, cut_off, budget);
    }
    ++removed;
  }
  return removed;
}

// -- the caches -------------------------------------------------------------------------

namespace {

// Whether a tmpfs can be idmapped here: a user namespace of a child of ours maps it.
Status check_idmapped_tmpfs(const std::string& directory) {
  int ready[2], go[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(go, O_CLOEXEC) != 0) return system_error("pipe");
  UniqueFd ready_read(ready[0]), ready_write(ready[1]), go_read(go[0]), go_write(go[1]);
  pid_t child = ::fork();
  if (child < 0) return system_error("fork");
  if (child == 0) {
    ::close(go[1]);
    ::close(ready[0]);
    char byte = ::unshare(CLONE_NEWUSER) == 0 ? 'u' : 'x';
    (void)!::write(ready_write.get(), &byte, 1);
    (void)!::read(go_read.get(), &byte, 1);
    ::_exit(0);
  }
  ready_write.reset();
  go_read.reset();
  auto end_child = [&] {
    go_write.reset();
    ::waitpid(child, nullptr, 0);
  };
  char byte = 0;
  if (::read(ready_read.get(), &byte, 1) != 1 || byte != 'u') {
    end_child();
    return fail(ErrorKind::engine, "cannot make a user namespace to map the caches' owner through");
  }
  std::string proc = "/proc/" + std::to_string(child);
  auto write_file = [](const std::string& path, const std::string& text) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    return fd && ::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  };
  std::string map = std::to_string(kInsideUid) + " 65534 1";
  bool mapped = write_file(proc + "/setgroups", "deny") && write_file(proc + "/uid_map", map) &&
                write_file(proc + "/gid_map", map);
  UniqueFd user(::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
  Status checked;
  std::string probe = directory + "/probe";
  if (!mapped || !user) {
    checked = system_error("mapping a user namespace");
  } else if (::mkdir(probe.c_str(), 0700) != 0 && errno != EEXIST) {
    checked = system_error("mkdir " + probe);
  } else if (::mount("tmpfs", probe.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700") != 0) {
    checked = system_error("mounting a tmpfs");
  } else {
    UniqueFd tree(mount_calls::open_tree(AT_FDCWD, probe.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
    mount_attr idmap{};
    idmap.attr_set = MOUNT_ATTR_IDMAP;
    idmap.userns_fd = static_cast<std::uint64_t>(user.get());
    if (!tree) checked = system_error("open_tree (Linux 5.2)");
    else if (mount_calls::mount_setattr(tree.get(), "", AT_EMPTY_PATH, &idmap) != 0)
      checked = system_error("idmapping a tmpfs mount (Linux 6.3)");
    ::umount2(probe.c_str(), MNT_DETACH);
  }
  ::rmdir(probe.c_str());
  end_child();
  return checked;
}

}  // namespace

Result<std::unique_ptr<CompileCaches>> CompileCaches::open(Config config) {
  if (config.bytes_per_tenant == 0) return fail(ErrorKind::engine, "--compile-cache-bytes is 0");
  if (::geteuid() != 0) return fail(ErrorKind::engine, "they need the server to run as root (it mounts them)");
  if (::unshare(CLONE_NEWNS) != 0) return system_error("making the server's own mount namespace");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
    return system_error("making the server's mount namespace a slave of the host's");
  const std::string& root = config.root;
  // What a server before left: its mounts (the root's own, and the caches under it), then
  // its directories.
  while (::umount2(root.c_str(), MNT_DETACH) == 0) {
  }
  remove_tree(root);
  std::error_code made;
  std::filesystem::create_directories(std::filesystem::path(root).parent_path(), made);
  if (::mkdir(root.c_str(), 0700) != 0) return system_error("mkdir " + root);
  // A mount of its own, private, so that the caches' mounts under it reach no other
  // mount namespace (a worker's copy of it is gone once its root is pivoted).
  if (::mount(root.c_str(), root.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
      ::mount(nullptr, root.c_str(), nullptr, MS_PRIVATE, nullptr) != 0)
    return system_error("making " + root + " a private mount");
  if (auto checked = check_idmapped_tmpfs(root); !checked) {
    ::umount2(root.c_str(), MNT_DETACH);
    remove_tree(root);
    return std::unexpected(checked.error());
  }
  UniqueFd host(::open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC));
  if (!host) return system_error("opening this process's mount namespace");
  return std::unique_ptr<CompileCaches>(new CompileCaches(std::move(config), std::move(host)));
}

CompileCaches::TaskThread::TaskThread(std::function<void()> first)
    : thread_([this, first = std::move(first)] { serve(first); }) {}

CompileCaches::TaskThread::~TaskThread() { end(); }

void CompileCaches::TaskThread::end() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void CompileCaches::TaskThread::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void CompileCaches::TaskThread::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
}

void CompileCaches::TaskThread::serve(const std::function<void()>& first) {
  if (first) first();
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      kcoral::wait(wake_, lock, [&] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

CompileCaches::CompileCaches(Config config, UniqueFd host_namespace)
    : config_(std::move(config)),
      host_namespace_(std::move(host_namespace)),
      // Entering another mount namespace needs a filesystem context of the thread's own.
      mounts_([this] {
        if (::unshare(CLONE_FS) == 0) return;
        std::lock_guard lock(mutex_);
        mounts_usable_ = false;
      }) {}

CompileCaches::~CompileCaches() {
  mounts_.end();
  trims_.end();
  ::umount2(config_.root.c_str(), MNT_DETACH);
  remove_tree(config_.root);
}

void CompileCaches::attach(int pidfd, pid_t pid, std::size_t tenant, Done done) {
  mounts_.post([this, pidfd, pid, tenant, done = std::move(done)] { done(attach_now(pidfd, pid, tenant)); });
}

bool CompileCaches::is_mounted(std::size_t tenant) {
  std::lock_guard lock(mutex_);
  return tenant < mounted_.size() && mounted_[tenant];
}

std::string CompileCaches::path_of(std::size_t tenant) const { return config_.root + "/" + std::to_string(tenant); }

Status CompileCaches::mount_tenant(std::size_t tenant) {
  if (is_mounted(tenant)) return {};
  std::string path = path_of(tenant);
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return system_error("mkdir " + path);
  std::string options = "size=" + std::to_string(config_.bytes_per_tenant) +
                        ",nr_inodes=" + std::to_string(inodes_for(config_.bytes_per_tenant)) +
                        ",mode=0700,uid=" + std::to_string(kInsideUid) + ",gid=" + std::to_string(kInsideGid);
  // Access times kept exactly: they order the eviction.
  if (::mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_STRICTATIME, options.c_str()) != 0)
    return system_error("mounting the compile cache's tmpfs on " + path);
  std::lock_guard lock(mutex_);
  if (tenant >= mounted_.size()) mounted_.resize(tenant + 1, false);
  mounted_[tenant] = true;
  return {};
}

Status CompileCaches::attach_now(int pidfd, pid_t pid, std::size_t tenant) {
  {
    std::lock_guard lock(mutex_);
    if (!mounts_usable_) return fail(ErrorKind::engine, "the compile caches stopped");
  }
  if (auto mounted = mount_tenant(tenant); !mounted) return mounted;
  std::string path = path_of(tenant);
  UniqueFd tree(mount_calls::open_tree(AT_FDCWD, path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree) return system_error("open_tree " + path);
  // The worker's user namespace, by its pid: still the worker's if the worker still lives
  // after the open (its pid cannot have been reused while its pidfd names it alive).
  UniqueFd user(::open(("/proc/" + std::to_string(pid) + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
  if (!user || ::syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) != 0)
    return fail(ErrorKind::engine, "the worker ended before its compile cache was mounted");
  mount_attr idmap{};
  idmap.attr_set = MOUNT_ATTR_IDMAP;
  idmap.userns_fd = static_cast<std::uint64_t>(user.get());
  if (mount_calls::mount_setattr(tree.get(), "", AT_EMPTY_PATH, &idmap) != 0)
    return system_error("idmapping the compile cache through the worker's user namespace");
  if (::setns(pidfd, CLONE_NEWNS) != 0) return system_error("entering the worker's mount namespace");
  int moved = mount_calls::move_mount(tree.get(), "", AT_FDCWD, kCompileCacheMount, MOVE_MOUNT_F_EMPTY_PATH);
  int move_error = errno;
  if (::setns(host_namespace_.get(), CLONE_NEWNS) != 0 || ::chdir("/") != 0) {
    // Left in a worker's namespace, this thread must mount nothing more.
    std::fprintf(stderr, "kcoral-server: the compile caches' mounting thread could not come back from a worker's mount "
                         "namespace (%s); no compile cache is mounted from now on\n", std::strerror(errno));
    std::lock_guard lock(mutex_);
    mounts_usable_ = false;
    return fail(ErrorKind::engine, "the compile caches stopped");
  }
  if (moved != 0) {
    errno = move_error;
    return system_error(std::string("mounting the compile cache at ") + kCompileCacheMount + " in the worker");
  }
  return {};
}

void CompileCaches::trim(std::size_t tenant) {
  {
    std::lock_guard lock(mutex_);
    if (tenant >= trim_queued_.size()) trim_queued_.resize(tenant + 1, false);
    if (trim_queued_[tenant]) return;  // that one reads the cache as it is then
    trim_queued_[tenant] = true;
  }
  trims_.post([this, tenant] { trim_now(tenant); });
}

void CompileCaches::trim_now(std::size_t tenant) {
  {
    std::lock_guard lock(mutex_);
    trim_queued_[tenant] = false;
  }
  if (!is_mounted(tenant)) return;
  UniqueFd root(::open(path_of(tenant).c_str(), kOpenDirectory));
  if (!root) return;
  auto usage = [fd = root.get()]() -> CacheUsage {
    struct statfs info {};
    if (::fstatfs(fd, &info) != 0) return {};
    return {(info.f_blocks - info.f_bfree) * static_cast<std::uint64_t>(info.f_bsize), info.f_files - info.f_ffree};
  };
  std::uint64_t bytes = config_.bytes_per_tenant, inodes = inodes_for(bytes);
  CacheUsage used = usage();
  if (used.bytes <= bytes / 4 * 3 && used.inodes <= inodes / 4 * 3) return;
  // At most one walk a second for each tenant: a cache kept nearly full of entries too new
  // to go would otherwise be walked after every one of its programs (the bound of its
  // tmpfs holds meanwhile, and the next program's end trims again).
  const auto now = std::chrono::steady_clock::now();
  if (tenant >= last_trim_.size()) last_trim_.resize(tenant + 1);
  if (last_trim_[tenant] && now - *last_trim_[tenant] < kTrimEvery) return;
  evict_least_recent(root.get(), bytes / 2, inodes / 2, usage, std::time(nullptr), kKeepNewerThanSeconds,
                     2 * inodes);
  last_trim_[tenant] = std::chrono::steady_clock::now();
}

}  // namespace kcoral
