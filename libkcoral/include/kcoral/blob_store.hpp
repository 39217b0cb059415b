// BlobStore: the server's content-addressed blob cache, with a byte budget (LRU) and pins.
//
// Blobs are keyed by their SHA-256. A program's blobs are pinned while it runs, so a later
// request that names the same digests finds them even under memory pressure. When every
// entry is pinned the store may exceed its budget until the pins go. A blob larger than a
// quarter of the budget is used for its request but not kept. Thread-safe.
//
//   kcoral::BlobStore store(1ull << 30);
//   auto resolved = store.resolve(program, std::move(supplied));
//   if (resolved && resolved->missing.empty()) run(program, resolved->blobs);
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kcoral/blob.hpp"
#include "kcoral/program.hpp"

namespace kcoral {

using BlobMap = std::unordered_map<std::string, Blob>;

class BlobStore {
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
    std::vector<std::string> digests_;
  };

  // What a program's blobs resolve to: present ones (pinned), and the digests the
  // client must send (CACHE_MISS) when `missing` is not empty.
  struct Resolution {
    BlobMap blobs;
    std::vector<std::string> missing;
    Pin pin;
  };

  explicit BlobStore(std::size_t capacity_bytes);
  BlobStore(const BlobStore&) = delete;
  BlobStore& operator=(const BlobStore&) = delete;

  void put(const std::string& digest, Blob blob);
  [[nodiscard]] std::optional<Blob> get(const std::string& digest);

  // Stores the supplied blobs, then finds every blob the program references. Fails with
  // `parse` when a tensor's blob does not hold exactly prod(shape) x itemsize bytes.
  [[nodiscard]] Result<Resolution> resolve(const Program& program, BlobMap supplied);

  [[nodiscard]] std::size_t size_bytes() const;
  [[nodiscard]] std::size_t count() const;
  [[nodiscard]] std::size_t capacity_bytes() const { return capacity_bytes_; }

 private:
  struct Entry {
    Blob blob;
    std::size_t pins = 0;
    std::list<std::string>::iterator lru;  // position in lru_ (front = most recent)
  };
  void unpin(const std::vector<std::string>& digests);
  void touch_locked(Entry& entry);
  void evict_locked();

  const std::size_t capacity_bytes_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;
  std::size_t size_bytes_ = 0;
};

}  // namespace kcoral
