// BlobStore: LRU over a byte budget, with pinned entries skipped by eviction.
#include "kcoral/blob_store.hpp"

#include <algorithm>

namespace kcoral {

BlobStore::Pin::Pin(Pin&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)), digests_(std::move(other.digests_)) {}

BlobStore::Pin& BlobStore::Pin::operator=(Pin&& other) noexcept {
  if (this != &other) {
    if (store_ != nullptr) store_->unpin(digests_);
    store_ = std::exchange(other.store_, nullptr);
    digests_ = std::move(other.digests_);
  }
  return *this;
}

BlobStore::Pin::~Pin() {
  if (store_ != nullptr) store_->unpin(digests_);
}

BlobStore::BlobStore(std::size_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

void BlobStore::put(const std::string& digest, Blob blob) {
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(digest); it != entries_.end()) {
    touch_locked(it->second);
    return;
  }
  if (blob.size() > capacity_bytes_ / 4) return;  // one blob must not flush the working set
  lru_.push_front(digest);
  size_bytes_ += blob.size();
  entries_.emplace(digest, Entry{std::move(blob), 0, lru_.begin()});
  evict_locked();
}

std::optional<Blob> BlobStore::get(const std::string& digest) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(digest);
  if (it == entries_.end()) return std::nullopt;
  touch_locked(it->second);
  return it->second.blob;
}

Result<BlobStore::Resolution> BlobStore::resolve(const Program& program, BlobMap supplied) {
  Resolution resolution;
  {
    std::lock_guard lock(mutex_);
    for (const std::string& digest : program.blobs()) {
      if (auto it = supplied.find(digest); it != supplied.end()) {
        resolution.blobs.emplace(digest, it->second);
        continue;
      }
      if (auto it = entries_.find(digest); it != entries_.end()) {
        touch_locked(it->second);
        resolution.blobs.emplace(digest, it->second.blob);
      } else {
        resolution.missing.push_back(digest);
      }
    }
  }
  for (auto& [digest, blob] : supplied) put(digest, std::move(blob));

  for (const Instruction& instruction : program.instructions()) {
    const auto* upload = std::get_if<Upload>(&instruction);
    if (upload == nullptr || upload->kind != UploadKind::tensor) continue;
    auto it = resolution.blobs.find(upload->blob);
    if (it == resolution.blobs.end()) continue;
    std::uint64_t expected = item_size(upload->dtype);
    for (std::int64_t extent : upload->shape) expected *= static_cast<std::uint64_t>(extent);
    if (it->second.size() != expected)
      return fail(ErrorKind::parse, "tensor upload '" + upload->id + "' declares " +
                                        std::to_string(expected) + " bytes (shape x itemsize) "
                                        "but its blob holds " + std::to_string(it->second.size()));
  }

  std::lock_guard lock(mutex_);
  resolution.pin.store_ = this;
  for (const auto& [digest, blob] : resolution.blobs) {
    if (auto it = entries_.find(digest); it != entries_.end()) {
      ++it->second.pins;
      resolution.pin.digests_.push_back(digest);
    }
  }
  return resolution;
}

std::size_t BlobStore::size_bytes() const {
  std::lock_guard lock(mutex_);
  return size_bytes_;
}

std::size_t BlobStore::count() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

void BlobStore::unpin(const std::vector<std::string>& digests) {
  std::lock_guard lock(mutex_);
  for (const std::string& digest : digests) {
    if (auto it = entries_.find(digest); it != entries_.end() && it->second.pins > 0)
      --it->second.pins;
  }
  evict_locked();
}

void BlobStore::touch_locked(Entry& entry) { lru_.splice(lru_.begin(), lru_, entry.lru); }

void BlobStore::evict_locked() {
  auto it = lru_.end();
  while (size_bytes_ > capacity_bytes_ && it != lru_.begin()) {
    --it;
    auto entry = entries_.find(*it);
    if (entry->second.pins > 0) continue;
    size_bytes_ -= entry->second.blob.size();
    entries_.erase(entry);
    it = lru_.erase(it);
  }
}

}  // namespace kcoral
