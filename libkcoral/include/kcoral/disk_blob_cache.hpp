// DiskBlobCache: uploaded blobs kept on disk, so that they survive a restart; the memory
// cache (BlobStore) falls back to it before a program's blobs count as missing.
//
// Each tenant has a directory of its own, named by the SHA-256 of the string that names
// the tenant here (DIR/<hash>/; the server's tenant keys, which a restart keeps), and a
// blob is found only in its tenant's: one tenant's upload is never another's cache hit,
// across restarts too. The byte budget is one for all tenants.
// One file per blob, named by its SHA-256 (DIR/<hash>/ab/abcdef…), written by a background thread
// (a request never waits for the disk) to a temporary name and renamed into place, so a
// file under its digest is always whole. A file is read back only if its bytes hash to its
// name: a damaged or altered file is removed and counts as absent. The directory is
// bounded in bytes and in blobs, least recently used first; at open it is scanned, ordered
// by the files' modification times (touched on each use). A blob is charged what it takes
// (charged(): its blocks, and a block for its inode, directory entry and place in the
// index), so that tiny blobs cannot fill the disk's inodes and the index's memory under a
// budget counted in their bytes. Blobs charged over a quarter of the budget are not kept,
// nor one whose write would leave less than a tenth of the file system free (the budget
// may be more than it holds, and it is shared with whatever else lives there).
// Thread-safe.
//
// Whoever can write to the directory could plant links in it and have the server write
// (or read) where they choose, so open refuses a directory not owned by the server's
// effective uid or writable by its group or others. Every file under it is then reached
// from a descriptor of the directory held open, one component at a time and never through
// a symbolic link; anything but a regular file under a digest's name is never opened and
// counts as absent. Blob files directly under DIR/ab/ (kept before blobs had tenants)
// belong to no known tenant and are removed at open.
//
//   auto disk = kcoral::DiskBlobCache::open("/var/cache/kcoral", 16ull << 30, 1u << 18);
//   (*disk)->store("alice", digest, blob);            // queued
//   std::optional<Blob> again = (*disk)->load("alice", digest);
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kcoral/blob.hpp"
#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

class DiskBlobCache {
 public:
  [[nodiscard]] static Result<std::unique_ptr<DiskBlobCache>> open(std::string directory, std::uint64_t capacity_bytes,
                                                                    std::size_t max_blobs);
  // What a blob of `size` bytes is charged in the budget.
  [[nodiscard]] static std::uint64_t charged(std::uint64_t size);
  DiskBlobCache(const DiskBlobCache&) = delete;
  DiskBlobCache& operator=(const DiskBlobCache&) = delete;
  ~DiskBlobCache();  // writes what is queued, then stops

  // The name of `tenant`'s directory under DIR.
  [[nodiscard]] static std::string tenant_directory(std::string_view tenant);

  // Queues `tenant`'s blob for writing, unless kept already, too large, or the queue is full.
  void store(std::string_view tenant, const std::string& digest, const Blob& blob);
  // `tenant`'s blob, in a new sealed memfd, when kept and whole.
  [[nodiscard]] std::optional<Blob> load(std::string_view tenant, const std::string& digest);
  // The size of `tenant`'s blob as kept, when it is (what load would make, before it is made).
  [[nodiscard]] std::optional<std::uint64_t> size_of(std::string_view tenant, const std::string& digest) const;
  // Waits until every queued blob is written (for tests and shutdown).
  void flush();

  [[nodiscard]] std::uint64_t size_bytes() const;  // charged, of all tenants
  [[nodiscard]] std::size_t count() const;
  [[nodiscard]] std::uint64_t capacity_bytes() const { return capacity_bytes_; }
  [[nodiscard]] std::size_t max_blobs() const { return max_blobs_; }

 private:
  // Entries are named "<tenant directory>/<digest>".
  struct Entry {
    std::uint64_t bytes = 0;
    std::list<std::string>::iterator lru;  // front: most recent
  };
  DiskBlobCache(UniqueFd root, UniqueFd tmp, std::uint64_t capacity_bytes, std::size_t max_blobs);
  void scan();
  void write_loop();
  void write(const std::string& key, const Blob& blob);
  [[nodiscard]] bool leaves_room_for(const Blob& blob) const;
  // Forgets the least recently used blobs until the cache is within its budgets; their
  // keys, whose files remove_files removes once the lock is let go (unlinking tens of
  // thousands of files under it held every request that names a blob).
  [[nodiscard]] std::vector<std::string> evict_locked();
  void remove_files(const std::vector<std::string>& keys) const;
  void forget_locked(const std::string& key);
  // DIR/<tenant>/ab of the key's digest ab…, made first when `create`; invalid when either
  // is not a directory.
  [[nodiscard]] UniqueFd subdirectory(const std::string& key, bool create) const;

  const UniqueFd root_;  // DIR
  const UniqueFd tmp_;   // DIR/tmp, where files are written before their rename
  const std::uint64_t capacity_bytes_;
  const std::size_t max_blobs_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;
  std::uint64_t size_bytes_ = 0;
  std::deque<std::pair<std::string, Blob>> queue_;
  std::unordered_set<std::string> queued_;  // queue_'s keys
  std::uint64_t queued_bytes_ = 0;
  bool writing_ = false;
  bool stopping_ = false;
  std::thread writer_;
};

}  // namespace kcoral
