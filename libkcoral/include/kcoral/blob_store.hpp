// BlobStore: the server's content-addressed blob cache, with pins and three budgets (LRU):
// bytes, blobs, and files (open descriptors), kept apart per tenant.
//
// Blobs are keyed by their tenant and their SHA-256: a tenant finds only the blobs it
// uploaded itself, so a digest is neither a way to read another tenant's bytes nor an
// oracle of what another tenant sent (its CACHE_MISS is the same whoever else holds the
// digest). Two tenants that upload the same bytes each keep a copy; the budgets are the
// server's, shared by all tenants. A request's blobs arrive as slices of one memfd, and
// the store keeps them so: many cached blobs may share one descriptor. Its byte count is
// that of the distinct memfds it holds, whole, so a kept slice is charged for the file it
// keeps alive; a small slice of a much larger file is copied into its own memfd when kept
// instead. The file budget bounds the descriptors the cache holds, whatever the uploads
// (every cached memfd is one open descriptor), and the blob budget bounds its bookkeeping.
// A program's blobs are pinned while it runs, so a later request that names the same
// digests finds them even under pressure; when every entry is pinned the store may exceed
// its budgets until the pins go. A blob larger than a quarter of the byte budget is used
// for its request but not kept. Thread-safe.
//
//   kcoral::BlobStore store({.bytes = 1ull << 30, .blobs = 65536, .files = 4096});
//   auto resolved = store.resolve("alice", program, std::move(supplied));
//   if (resolved && resolved->missing.empty()) run(program, resolved->blobs);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kcoral/blob.hpp"
#include "kcoral/disk_blob_cache.hpp"
#include "kcoral/program.hpp"

namespace kcoral {

using BlobMap = std::unordered_map<std::string, Blob>;

class BlobStore {
  // A cached blob's name: whose it is, and its digest.
  struct Key {
    std::string tenant;
    std::string digest;
    bool operator==(const Key&) const = default;
  };

 public:
  // Keeps blobs referenced by a running program from eviction; unpins when destroyed.
  class Pin {
   public:
    Pin() = default;
    Pin(Pin&& other) noexcept;
    Pin& operator=(Pin&& other) noexcept;
    Pin(const Pin&) = delete;
    Pin& operator=(const Pin&) = delete;
    ~Pin();

   private:
    friend class BlobStore;
    BlobStore* store_ = nullptr;
    std::vector<Key> keys_;
  };

  // What a program's blobs resolve to: present ones (pinned), and the digests the
  // client must send (CACHE_MISS) when `missing` is not empty.
  struct Resolution {
    BlobMap blobs;
    std::vector<std::string> missing;
    Pin pin;
  };

  struct Limits {
    std::size_t bytes = 0;
    std::size_t blobs = SIZE_MAX;
    std::size_t files = SIZE_MAX;
  };

  // What one tenant's blobs take of the cache (the bytes of the blobs themselves).
  struct Usage {
    std::size_t bytes = 0;
    std::size_t blobs = 0;
  };

  // `disk`, when given (and outliving the store), keeps every stored blob on disk too (in
  // its tenant's part of it), and is asked for a blob before it counts as missing.
  explicit BlobStore(Limits limits, DiskBlobCache* disk = nullptr);
  explicit BlobStore(std::size_t capacity_bytes) : BlobStore(Limits{capacity_bytes}) {}
  BlobStore(const BlobStore&) = delete;
  BlobStore& operator=(const BlobStore&) = delete;

  // `tenant`: whose blob it is; get finds only what put stored for the same tenant.
  void put(std::string_view tenant, const std::string& digest, Blob blob);
  // put for each of one request's blobs. Those small ones put would copy, each into a memfd
  // of its own, are copied together instead, about kSharedFileSlack bytes to a memfd.
  void put_all(std::string_view tenant, BlobMap blobs);
  [[nodiscard]] std::optional<Blob> get(std::string_view tenant, const std::string& digest);

  // Asked before resolve makes bytes for one program (copies, blobs read back from disk):
  // true if the caller's budget takes them. Empty: no budget.
  using CopyBudget = std::function<bool(std::uint64_t bytes)>;

  // Stores the supplied blobs as `tenant`'s, then finds every blob the program references
  // among that tenant's (in memory, then on disk); another tenant's count as missing. Fails with
  // `parse` when a tensor's blob does not hold exactly prod(shape) x itemsize bytes. The
  // blobs returned share no memfd with bytes the program does not reference (those of a
  // memfd it uses only in part are copied into one of its own), so each memfd may be
  // handed to the program's process whole. What it copies or reads back for the program is
  // asked of `budget` first, so that small requests naming large cached blobs cannot make
  // the server hold copies past its budget: `busy` when it refuses.
  [[nodiscard]] Result<Resolution> resolve(std::string_view tenant, const Program& program, BlobMap supplied,
                                           const CopyBudget& budget = {});
  // What resolve(tenant, program, supplied) would load from the disk or copy, as things
  // stand now: the bytes (what it asks of its budget) and the blobs it reads back from the
  // disk (each opened, mapped, hashed and given a memfd of its own), what makes its time
  // grow, for a caller that runs long steps elsewhere. Changes nothing; resolve may find
  // it otherwise a moment later.
  struct ToMake {
    std::uint64_t bytes = 0;
    std::size_t blobs = 0;
  };
  [[nodiscard]] ToMake to_make(std::string_view tenant, const Program& program, const BlobMap& supplied) const;

  [[nodiscard]] std::size_t size_bytes() const;  // of the distinct memfds held
  [[nodiscard]] std::size_t count() const;       // blobs
  [[nodiscard]] std::size_t files() const;       // distinct memfds (descriptors) held
  [[nodiscard]] Usage usage(std::string_view tenant) const;
  [[nodiscard]] const Limits& limits() const { return limits_; }
  [[nodiscard]] const DiskBlobCache* disk() const { return disk_; }
  [[nodiscard]] std::size_t capacity_bytes() const { return limits_.bytes; }

 private:
  struct KeyHash {
    std::size_t operator()(const Key& key) const;
  };
  struct Entry {
    Blob blob;
    std::size_t pins = 0;
    std::list<Key>::iterator lru;  // position in lru_ (front = most recent) while unpinned
  };
  struct File {
    std::size_t bytes = 0;  // the whole memfd
    std::size_t blobs = 0;  // entries that share it
  };
  using Entries = std::unordered_map<Key, Entry, KeyHash>;
  void unpin(const std::vector<Key>& keys);
  void pin_locked(Entry& entry);
  void unpin_locked(Entries::iterator entry);
  void touch_locked(Entry& entry);
  void evict_locked();
  [[nodiscard]] bool over_budget_locked() const;
  void erase_locked(Entries::iterator entry);

  const Limits limits_;
  DiskBlobCache* const disk_;
  mutable std::mutex mutex_;
  Entries entries_;
  std::unordered_map<int, File> files_;  // by descriptor: unique while an entry holds it open
  std::list<Key> lru_;
  std::size_t size_bytes_ = 0;
  std::unordered_map<std::string, Usage> usage_;  // by tenant
};

}  // namespace kcoral
