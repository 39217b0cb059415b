// DiskBlobCache: files named by digest in their tenant's directory, a writer thread, LRU by
// bytes, checked reads, all reached from the directory's descriptor without following a link.
#include "kcoral/disk_blob_cache.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <tuple>
#include <vector>

#include "kcoral/request_id.hpp"
#include "kcoral/sha256.hpp"
#include "kcoral/wait.hpp"

namespace kcoral {
namespace {

namespace fs = std::filesystem;

constexpr int kDirectoryFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

struct CloseDir {
  void operator()(DIR* stream) const { ::closedir(stream); }
};

// The names in a directory ("." and ".." aside), read through a description of its own so
// that `directory` itself is not moved.
std::vector<std::string> names_in(int directory) {
  std::vector<std::string> names;
  int fd = ::openat(directory, ".", kDirectoryFlags);
  if (fd < 0) return names;
  std::unique_ptr<DIR, CloseDir> stream(::fdopendir(fd));
  if (!stream) {
    ::close(fd);
    return names;
  }
  while (const dirent* entry = ::readdir(stream.get())) {
    std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  return names;
}

// An entry's name: its tenant's directory and its digest.
std::string key_of(std::string_view tenant, const std::string& digest) {
  return DiskBlobCache::tenant_directory(tenant) + "/" + digest;
}

std::string digest_of(const std::string& key) { return key.substr(key.find('/') + 1); }

// Blob files kept before blobs had tenants (DIR/ab/<digest>): nobody knows whose they
// were, so no tenant may have them. Reached from descriptors: a link goes, never its target.
void remove_untenanted(int root, const std::string& prefix) {
  if (UniqueFd directory{::openat(root, prefix.c_str(), kDirectoryFlags)}) {
    for (const std::string& name : names_in(directory.get()))
      if (is_sha256_hex(name)) ::unlinkat(directory.get(), name.c_str(), 0);
  }
  ::unlinkat(root, prefix.c_str(), AT_REMOVEDIR);  // when empty
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

std::uint64_t DiskBlobCache::charged(std::uint64_t size) {
  constexpr std::uint64_t kBlock = 4096;
  return (size + kBlock - 1) / kBlock * kBlock + kBlock;
}

Result<std::unique_ptr<DiskBlobCache>> DiskBlobCache::open(std::string directory, std::uint64_t capacity_bytes,
                                                           std::size_t max_blobs) {
  std::error_code ec;
  if (fs::path parent = fs::path(directory).parent_path(); !parent.empty()) fs::create_directories(parent, ec);
  if (ec || (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST))
    return fail(ErrorKind::engine, "cannot make the disk cache " + directory + ": " +
                                       (ec ? ec.message() : std::string(std::strerror(errno))));
  UniqueFd root(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat info {};
  if (!root || ::fstat(root.get(), &info) != 0)
    return fail(ErrorKind::engine, "cannot open the disk cache " + directory + ": " + std::strerror(errno));
  if (info.st_uid != ::geteuid())
    return fail(ErrorKind::engine,
                "the disk cache " + directory + " belongs to uid " + std::to_string(info.st_uid) +
                    ", not to this server's uid " + std::to_string(::geteuid()) +
                    ": its owner could plant links in it and have the server write where they choose; give it "
                    "to the server's user (chown) or choose a directory of the server's own");
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fail(ErrorKind::engine, "the disk cache " + directory + " is writable by its group or by others (mode " +
                                       octal_mode(info.st_mode) +
                                       "): they could plant links in it and have the server write where they "
                                       "choose; make it 0700 (chmod 700 " + directory + ")");
  ::fchmod(root.get(), 0700);  // the blobs are the clients': no one else reads them either
  if (::mkdirat(root.get(), "tmp", 0700) != 0 && errno != EEXIST)
    return fail(ErrorKind::engine, "cannot make " + directory + "/tmp: " + std::strerror(errno));
  UniqueFd tmp(::openat(root.get(), "tmp", kDirectoryFlags));
  if (!tmp)
    return fail(ErrorKind::engine, "cannot open " + directory + "/tmp (it must be a directory, not a link): " +
                                       std::strerror(errno));
  // Unfinished writes of an earlier run.
  for (const std::string& leftover : names_in(tmp.get())) ::unlinkat(tmp.get(), leftover.c_str(), 0);
  std::unique_ptr<DiskBlobCache> cache(new DiskBlobCache(std::move(root), std::move(tmp), capacity_bytes, max_blobs));
  cache->scan();
  cache->writer_ = std::thread([raw = cache.get()] { raw->write_loop(); });
  return cache;
}

DiskBlobCache::DiskBlobCache(UniqueFd root, UniqueFd tmp, std::uint64_t capacity_bytes, std::size_t max_blobs)
    : root_(std::move(root)), tmp_(std::move(tmp)), capacity_bytes_(capacity_bytes), max_blobs_(max_blobs) {}

DiskBlobCache::~DiskBlobCache() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string DiskBlobCache::tenant_directory(std::string_view tenant) { return sha256_hex(tenant); }

UniqueFd DiskBlobCache::subdirectory(const std::string& key, bool create) const {
  std::size_t slash = key.find('/');
  std::string tenant = key.substr(0, slash);
  std::string prefix = key.substr(slash + 1, 2);
  if (create) ::mkdirat(root_.get(), tenant.c_str(), 0700);  // EEXIST: made already
  UniqueFd directory(::openat(root_.get(), tenant.c_str(), kDirectoryFlags));
  if (!directory) return directory;
  if (create) ::mkdirat(directory.get(), prefix.c_str(), 0700);
  return UniqueFd(::openat(directory.get(), prefix.c_str(), kDirectoryFlags));
}

void DiskBlobCache::scan() {
  struct Found {
    std::string key;
    std::uint64_t bytes;
    std::timespec used;
  };
  std::vector<Found> found;
  for (const std::string& tenant : names_in(root_.get())) {
    if (tenant.size() == 2) remove_untenanted(root_.get(), tenant);
    if (!is_sha256_hex(tenant)) continue;  // tmp, or not ours
    UniqueFd tenant_directory(::openat(root_.get(), tenant.c_str(), kDirectoryFlags));
    if (!tenant_directory) continue;  // not a directory: nothing kept under it
    for (const std::string& prefix : names_in(tenant_directory.get())) {
      if (prefix.size() != 2) continue;
      UniqueFd directory(::openat(tenant_directory.get(), prefix.c_str(), kDirectoryFlags));
      if (!directory) continue;
      for (const std::string& name : names_in(directory.get())) {
        struct stat info {};
        if (!is_sha256_hex(name) || !name.starts_with(prefix) ||
            ::fstatat(directory.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(info.st_mode))
          continue;
        found.push_back({tenant + "/" + name, static_cast<std::uint64_t>(info.st_size), info.st_mtim});
      }
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return std::tie(a.used.tv_sec, a.used.tv_nsec) > std::tie(b.used.tv_sec, b.used.tv_nsec);
  });
  std::vector<std::string> evicted;
  {
    std::lock_guard lock(mutex_);
    for (Found& blob : found) {
      lru_.push_back(blob.key);
      entries_.emplace(blob.key, Entry{blob.bytes, std::prev(lru_.end())});
      size_bytes_ += charged(blob.bytes);
    }
    evicted = evict_locked();
  }
  remove_files(evicted);
}

void DiskBlobCache::store(std::string_view tenant, const std::string& digest, const Blob& blob) {
  if (charged(blob.size()) > capacity_bytes_ / 4 || !is_sha256_hex(digest)) return;
  std::string key = key_of(tenant, digest);
  {
    std::lock_guard lock(mutex_);
    if (entries_.contains(key)) return;
    // What waits for the disk is memory: at most a quarter of the budget of it, each blob
    // charged as on the disk, and at most as many blobs as the disk keeps.
    if (queued_bytes_ + charged(blob.size()) > capacity_bytes_ / 4 || queue_.size() >= max_blobs_) return;
    if (!queued_.insert(key).second) return;  // a scan of the queue here took 100,000 blobs minutes
    queue_.emplace_back(std::move(key), blob);
    queued_bytes_ += charged(blob.size());
  }
  changed_.notify_all();
}

void DiskBlobCache::flush() {
  std::unique_lock lock(mutex_);
  kcoral::wait(changed_, lock, [this] { return queue_.empty() && !writing_; });
}

void DiskBlobCache::write_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    kcoral::wait(changed_, lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and all written
    auto [key, blob] = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    write(key, blob);
    lock.lock();
    queued_bytes_ -= charged(blob.size());
    queued_.erase(key);
    writing_ = false;
    changed_.notify_all();
  }
}

// The file system is shared with whatever else lives on it (the event log, the work root,
// other services), and its free space may be less than the budget: a blob is not kept when
// writing it would leave less than a tenth of the file system free.
bool DiskBlobCache::leaves_room_for(const Blob& blob) const {
  struct statvfs info {};
  if (::fstatvfs(root_.get(), &info) != 0) return false;
  const std::uint64_t free = static_cast<std::uint64_t>(info.f_bavail) * info.f_frsize;
  const std::uint64_t total = static_cast<std::uint64_t>(info.f_blocks) * info.f_frsize;
  return free >= charged(blob.size()) + total / 10;
}

void DiskBlobCache::write(const std::string& key, const Blob& blob) {
  if (!leaves_room_for(blob)) return;
  UniqueFd directory = subdirectory(key, /*create=*/true);
  if (!directory) return;
  std::string digest = digest_of(key);
  std::string temporary = digest + "." + new_request_id();
  {
    UniqueFd fd(::openat(tmp_.get(), temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return;
    std::span<const std::byte> bytes = blob.bytes();
    std::size_t written = 0;
    while (written < bytes.size()) {
      ssize_t n = ::write(fd.get(), bytes.data() + written, bytes.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      written += static_cast<std::size_t>(n);
    }
    if (written != bytes.size()) {  // disk full, say: not kept
      ::unlinkat(tmp_.get(), temporary.c_str(), 0);
      return;
    }
  }
  // A link planted under the digest's name is replaced, not followed.
  if (::renameat(tmp_.get(), temporary.c_str(), directory.get(), digest.c_str()) != 0) {
    ::unlinkat(tmp_.get(), temporary.c_str(), 0);
    return;
  }
  std::vector<std::string> evicted;
  {
    std::lock_guard lock(mutex_);
    if (entries_.contains(key)) return;
    lru_.push_front(key);
    entries_.emplace(key, Entry{blob.size(), lru_.begin()});
    size_bytes_ += charged(blob.size());
    evicted = evict_locked();
  }
  remove_files(evicted);
}

std::optional<std::uint64_t> DiskBlobCache::size_of(std::string_view tenant, const std::string& digest) const {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(key_of(tenant, digest));
  if (it == entries_.end()) return std::nullopt;
  return it->second.bytes;
}

std::optional<Blob> DiskBlobCache::load(std::string_view tenant, const std::string& digest) {
  if (!is_sha256_hex(digest)) return std::nullopt;
  std::string key = key_of(tenant, digest);
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  // Opened only when a regular file, checked again once open (it may have been swapped).
  UniqueFd directory = subdirectory(key, /*create=*/false);
  std::optional<Blob> blob;
  struct stat info {};
  UniqueFd fd;
  if (directory && ::fstatat(directory.get(), digest.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(info.st_mode))
    fd = UniqueFd(::openat(directory.get(), digest.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd && ::fstat(fd.get(), &info) == 0 && S_ISREG(info.st_mode)) {
    auto size = static_cast<std::size_t>(info.st_size);
    void* mapped = size > 0 ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0) : nullptr;
    if (size == 0 || mapped != MAP_FAILED) {
      std::span<const std::byte> bytes(static_cast<const std::byte*>(mapped), size);
      if (sha256_hex(bytes) == digest) {
        if (auto copy = Blob::copy_of(bytes)) blob = std::move(*copy);
      }
      if (size > 0) ::munmap(mapped, size);
    }
  }
  if (blob) ::futimens(fd.get(), nullptr);  // its use, for the order after a restart
  std::lock_guard lock(mutex_);
  if (!blob) {  // gone, damaged, altered or not a file: not kept any more
    if (directory) ::unlinkat(directory.get(), digest.c_str(), 0);  // a link goes, never its target
    forget_locked(key);
    return std::nullopt;
  }
  return blob;
}

std::vector<std::string> DiskBlobCache::evict_locked() {
  std::vector<std::string> evicted;
  while ((size_bytes_ > capacity_bytes_ || entries_.size() > max_blobs_) && !lru_.empty()) {
    evicted.push_back(lru_.back());
    forget_locked(evicted.back());
  }
  return evicted;
}

// Only the writing thread (or open) removes files, so a blob evicted here and stored again
// meanwhile is written after its old file is gone.
void DiskBlobCache::remove_files(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys)
    if (UniqueFd directory = subdirectory(key, /*create=*/false))
      ::unlinkat(directory.get(), digest_of(key).c_str(), 0);
}

void DiskBlobCache::forget_locked(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  size_bytes_ -= charged(it->second.bytes);
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

std::uint64_t DiskBlobCache::size_bytes() const {
  std::lock_guard lock(mutex_);
  return size_bytes_;
}

std::size_t DiskBlobCache::count() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace kcoral
