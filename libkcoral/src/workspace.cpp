// Workspace: openat()-based traversal that never follows a symbolic link.
#include "workspace.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

namespace kcoral {
namespace {

constexpr int kDirectoryFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

std::string errno_text() { return std::strerror(errno); }

std::vector<std::string_view> components(std::string_view path) {
  std::vector<std::string_view> parts;
  while (!path.empty()) {
    std::size_t slash = path.find('/');
    parts.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return parts;
}

// Opens the directory `parts` names under `base`, refusing links; optionally creating.
Result<UniqueFd> open_directory(int base, const std::vector<std::string_view>& parts,
                                bool create, ErrorKind kind) {
  UniqueFd fd(::fcntl(base, F_DUPFD_CLOEXEC, 3));
  for (std::string_view part : parts) {
    std::string name(part);
    if (create && ::mkdirat(fd.get(), name.c_str(), 0700) != 0 && errno != EEXIST)
      return fail(kind, "cannot create directory '" + name + "': " + errno_text());
    UniqueFd next(::openat(fd.get(), name.c_str(), kDirectoryFlags));
    if (!next)
      return fail(kind, errno == ELOOP || errno == ENOTDIR
                            ? "'" + name + "' is not a directory (symbolic links are refused)"
                            : "cannot open directory '" + name + "': " + errno_text());
    fd = std::move(next);
  }
  return fd;
}

// Reads a regular file opened relative to `directory`, checking it did not change.
Result<std::string> read_regular(int directory, const std::string& name, const std::string& shown,
                                 std::uint64_t budget_bytes) {
  UniqueFd fd(::openat(directory, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd)
    return fail(ErrorKind::serialization,
                errno == ELOOP ? "'" + shown + "' is a symbolic link; only regular files are returned"
                               : "cannot open '" + shown + "': " + errno_text());
  struct stat before {};
  if (::fstat(fd.get(), &before) != 0 || !S_ISREG(before.st_mode))
    return fail(ErrorKind::serialization, "'" + shown + "' is not a regular file");
  auto size = static_cast<std::uint64_t>(before.st_size);
  if (size > budget_bytes)
    return fail(ErrorKind::response_too_large, "'" + shown + "' (" + std::to_string(size) +
                                                   " bytes) would exceed the server's response limit");
  std::string data(size, '\0');
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd.get(), data.data() + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  struct stat after {};
  ::fstat(fd.get(), &after);
  if (done != size || after.st_size != before.st_size ||
      after.st_mtim.tv_sec != before.st_mtim.tv_sec || after.st_mtim.tv_nsec != before.st_mtim.tv_nsec ||
      after.st_ctim.tv_sec != before.st_ctim.tv_sec || after.st_ctim.tv_nsec != before.st_ctim.tv_nsec)
    return fail(ErrorKind::serialization, "'" + shown + "' changed while it was being read");
  return data;
}

struct FolderWalk {
  FolderSnapshot snapshot;
  std::uint64_t budget_bytes;
  std::set<std::pair<dev_t, ino_t>> seen;

  Status visit(int directory, const std::string& prefix) {
    struct stat info {};
    if (::fstat(directory, &info) != 0 || !seen.emplace(info.st_dev, info.st_ino).second)
      return fail(ErrorKind::serialization, "the folder contains a directory twice");
    UniqueFd listing_fd(::fcntl(directory, F_DUPFD_CLOEXEC, 3));
    DIR* listing = ::fdopendir(listing_fd.release());
    if (listing == nullptr)
      return fail(ErrorKind::serialization, "cannot list '" + prefix + "': " + errno_text());
    std::vector<std::string> names;
    while (dirent* entry = ::readdir(listing)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    ::closedir(listing);
    for (const std::string& name : names) {
      std::string relative = prefix.empty() ? name : prefix + "/" + name;
      struct stat entry {};
      if (::fstatat(directory, name.c_str(), &entry, AT_SYMLINK_NOFOLLOW) != 0)
        return fail(ErrorKind::serialization, "'" + relative + "' vanished while being read");
      if (S_ISDIR(entry.st_mode)) {
        snapshot.directories.push_back(relative);
        UniqueFd child(::openat(directory, name.c_str(), kDirectoryFlags));
        if (!child) return fail(ErrorKind::serialization, "cannot open '" + relative + "': " + errno_text());
        if (auto status = visit(child.get(), relative); !status) return status;
      } else if (S_ISREG(entry.st_mode)) {
        auto data = read_regular(directory, name, relative, budget_bytes);
        if (!data) return std::unexpected(data.error());
        budget_bytes -= data->size();
        snapshot.files.emplace_back(relative, std::move(*data));
      } else {
        return fail(ErrorKind::serialization,
                    "'" + relative + "' is a " + (S_ISLNK(entry.st_mode) ? "symbolic link" : "special file") +
                        "; folder returns hold regular files and directories only");
      }
    }
    return {};
  }
};

}  // namespace

Result<Workspace> Workspace::create(const std::string& root) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  std::string pattern = root + "/kcoral-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr)
    return fail(ErrorKind::engine, "cannot create a working directory under " + root + ": " + errno_text());
  Workspace workspace;
  workspace.root_ = pattern;
  workspace.work_dir_ = pattern + "/work";
  workspace.modules_dir_ = pattern + "/modules";
  if (::mkdir(workspace.work_dir_.c_str(), 0700) != 0 || ::mkdir(workspace.modules_dir_.c_str(), 0700) != 0)
    return fail(ErrorKind::engine, "cannot create a working directory: " + errno_text());
  return workspace;
}

Workspace::Workspace(Workspace&& other) noexcept
    : root_(std::exchange(other.root_, {})),
      work_dir_(std::move(other.work_dir_)),
      modules_dir_(std::move(other.modules_dir_)) {}

Workspace& Workspace::operator=(Workspace&& other) noexcept {
  if (this != &other) {
    if (!root_.empty()) remove_tree(root_);
    root_ = std::exchange(other.root_, {});
    work_dir_ = std::move(other.work_dir_);
    modules_dir_ = std::move(other.modules_dir_);
  }
  return *this;
}

Workspace::~Workspace() {
  if (!root_.empty()) remove_tree(root_);
}

Status Workspace::write_file(std::string_view path, std::string_view data) {
  std::vector<std::string_view> parts = components(path);
  std::string leaf(parts.back());
  parts.pop_back();
  UniqueFd work(::open(work_dir_.c_str(), kDirectoryFlags));
  auto directory = open_directory(work.get(), parts, /*create=*/true, ErrorKind::runtime);
  if (!directory) return std::unexpected(directory.error());
  UniqueFd file(::openat(directory->get(), leaf.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!file) return fail(ErrorKind::runtime, "cannot create '" + std::string(path) + "': " + errno_text());
  while (!data.empty()) {
    ssize_t n = ::write(file.get(), data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(ErrorKind::runtime, "cannot write '" + std::string(path) + "': " + errno_text());
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

Result<FileSnapshot> Workspace::read_file(std::string_view path, std::uint64_t budget_bytes) {
  std::vector<std::string_view> parts = components(path);
  std::string leaf(parts.back());
  parts.pop_back();
  UniqueFd work(::open(work_dir_.c_str(), kDirectoryFlags));
  auto directory = open_directory(work.get(), parts, false, ErrorKind::serialization);
  if (!directory) return std::unexpected(directory.error());
  auto data = read_regular(directory->get(), leaf, std::string(path), budget_bytes);
  if (!data) return std::unexpected(data.error());
  return FileSnapshot{std::move(*data)};
}

Result<FolderSnapshot> Workspace::read_folder(std::string_view path, std::uint64_t budget_bytes) {
  UniqueFd work(::open(work_dir_.c_str(), kDirectoryFlags));
  auto directory = open_directory(work.get(), components(path), false, ErrorKind::serialization);
  if (!directory) return std::unexpected(directory.error());
  FolderWalk walk{{}, budget_bytes, {}};
  KCORAL_TRY(walk.visit(directory->get(), ""));
  std::sort(walk.snapshot.files.begin(), walk.snapshot.files.end());
  std::sort(walk.snapshot.directories.begin(), walk.snapshot.directories.end());
  return std::move(walk.snapshot);
}

}  // namespace kcoral
