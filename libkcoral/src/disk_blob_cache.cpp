// DiskBlobCache: files named by digest, a writer thread, LRU by bytes, checked reads.
#include "kcoral/disk_blob_cache.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kcoral/request_id.hpp"
#include "kcoral/sha256.hpp"

namespace kcoral {
namespace fs = std::filesystem;

Result<std::unique_ptr<DiskBlobCache>> DiskBlobCache::open(std::string directory, std::uint64_t capacity_bytes) {
  std::error_code ec;
  fs::create_directories(fs::path(directory) / "tmp", ec);
  if (ec) return fail(ErrorKind::engine, "cannot make the disk cache " + directory + ": " + ec.message());
  fs::permissions(directory, fs::perms::owner_all, fs::perm_options::replace, ec);
  // Unfinished writes of an earlier run.
  for (const auto& leftover : fs::directory_iterator(fs::path(directory) / "tmp", ec)) fs::remove(leftover, ec);
  std::unique_ptr<DiskBlobCache> cache(new DiskBlobCache(std::move(directory), capacity_bytes));
  cache->scan();
  cache->writer_ = std::thread([raw = cache.get()] { raw->write_loop(); });
  return cache;
}

DiskBlobCache::DiskBlobCache(std::string directory, std::uint64_t capacity_bytes)
    : directory_(std::move(directory)), capacity_bytes_(capacity_bytes) {}

DiskBlobCache::~DiskBlobCache() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string DiskBlobCache::path_of(const std::string& digest) const {
  return directory_ + "/" + digest.substr(0, 2) + "/" + digest;
}

void DiskBlobCache::scan() {
  struct Found {
    std::string digest;
    std::uint64_t bytes;
    fs::file_time_type used;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(directory_, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!it->is_regular_file(ec) || !is_sha256_hex(name) || it->path().parent_path().filename() != name.substr(0, 2))
      continue;
    found.push_back({name, static_cast<std::uint64_t>(it->file_size(ec)), it->last_write_time(ec)});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.used > b.used; });
  std::lock_guard lock(mutex_);
  for (Found& blob : found) {
    lru_.push_back(blob.digest);
    entries_.emplace(blob.digest, Entry{blob.bytes, std::prev(lru_.end())});
    size_bytes_ += blob.bytes;
  }
  evict_locked();
}

void DiskBlobCache::store(const std::string& digest, const Blob& blob) {
  if (blob.size() > capacity_bytes_ / 4) return;
  {
    std::lock_guard lock(mutex_);
    if (entries_.contains(digest)) return;
    // What waits for the disk is memory: at most a quarter of the budget of it.
    if (queued_bytes_ + blob.size() > capacity_bytes_ / 4) return;
    if (std::any_of(queue_.begin(), queue_.end(), [&](const auto& queued) { return queued.first == digest; })) return;
    queue_.emplace_back(digest, blob);
    queued_bytes_ += blob.size();
  }
  changed_.notify_all();
}

void DiskBlobCache::flush() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

void DiskBlobCache::write_loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and all written
    auto [digest, blob] = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    write(digest, blob);
    lock.lock();
    queued_bytes_ -= blob.size();
    writing_ = false;
    changed_.notify_all();
  }
}

void DiskBlobCache::write(const std::string& digest, const Blob& blob) {
  std::string final_path = path_of(digest);
  std::string temporary = directory_ + "/tmp/" + digest + "." + new_request_id();
  std::error_code ec;
  fs::create_directories(fs::path(final_path).parent_path(), ec);
  {
    UniqueFd fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
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
      fs::remove(temporary, ec);
      return;
    }
  }
  fs::rename(temporary, final_path, ec);
  if (ec) {
    fs::remove(temporary, ec);
    return;
  }
  std::lock_guard lock(mutex_);
  if (entries_.contains(digest)) return;
  lru_.push_front(digest);
  entries_.emplace(digest, Entry{blob.size(), lru_.begin()});
  size_bytes_ += blob.size();
  evict_locked();
}

std::optional<Blob> DiskBlobCache::load(const std::string& digest) {
  if (!is_sha256_hex(digest)) return std::nullopt;
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(digest);
    if (it == entries_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  std::string path = path_of(digest);
  std::optional<Blob> blob;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat info {};
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
  std::lock_guard lock(mutex_);
  if (!blob) {  // gone, damaged or altered: not kept any more
    std::error_code ec;
    fs::remove(path, ec);
    forget_locked(digest);
    return std::nullopt;
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // its use, for the order after a restart
  return blob;
}

void DiskBlobCache::evict_locked() {
  while (size_bytes_ > capacity_bytes_ && !lru_.empty()) {
    std::string digest = lru_.back();
    std::error_code ec;
    fs::remove(path_of(digest), ec);
    forget_locked(digest);
  }
}

void DiskBlobCache::forget_locked(const std::string& digest) {
  auto it = entries_.find(digest);
  if (it == entries_.end()) return;
  size_bytes_ -= it->second.bytes;
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
