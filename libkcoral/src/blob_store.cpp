// BlobStore: LRU over a byte budget, with pinned entries skipped by eviction, keyed by
// tenant and digest.
#include "kcoral/blob_store.hpp"

#include <algorithm>
#include <functional>

namespace kcoral {

BlobStore::Pin::Pin(Pin&& other) noexcept
    : store_(std::exchange(other.store_, nullptr)), keys_(std::move(other.keys_)) {}

BlobStore::Pin& BlobStore::Pin::operator=(Pin&& other) noexcept {
  if (this != &other) {
    if (store_ != nullptr) store_->unpin(keys_);
    store_ = std::exchange(other.store_, nullptr);
    keys_ = std::move(other.keys_);
  }
  return *this;
}

BlobStore::Pin::~Pin() {
  if (store_ != nullptr) store_->unpin(keys_);
}

// By digest alone: the tenants that hold one digest are few, and equality tells them apart.
std::size_t BlobStore::KeyHash::operator()(const Key& key) const { return std::hash<std::string>{}(key.digest); }

namespace {

// A slice may keep this much of its memfd's other bytes alive in the cache; beyond it, the
// cache keeps a copy of the slice alone.
constexpr std::size_t kSharedFileSlack = std::size_t{1} << 20;

bool keeps_others_alive(const Blob& blob) {
  return blob.file_size() - blob.size() > std::max(blob.size(), kSharedFileSlack);
}

// Cached blobs may share a memfd with blobs of other requests, and a memfd handed to a
// program's process can be read whole. So the blobs of a memfd the program does not use
// entirely are copied into one new memfd of its own.
Status over_budget(std::uint64_t bytes) {
  return fail(ErrorKind::busy, "the server holds too many bytes for programs at once to make the " +
                                   std::to_string(bytes) + " bytes of cached blobs this program needs; retry");
}

Status confine(BlobMap& blobs, const BlobStore::CopyBudget& budget) {
  std::unordered_map<int, std::size_t> used;  // parts of each memfd the program uses
  for (const auto& [digest, blob] : blobs) ++used[blob.fd()];
  std::vector<std::string> copied;
  std::uint64_t bytes = 0;
  for (const auto& [digest, blob] : blobs) {
    if (used[blob.fd()] == blob.file_parts()) continue;
    copied.push_back(digest);
    bytes += blob.size();
  }
  if (copied.empty()) return {};
  if (budget && !budget(bytes)) return over_budget(bytes);
  BlobBuilder own(BlobBuilder::kMappableFrom);
  for (const std::string& digest : copied)
    if (auto status = own.append(blobs.at(digest).bytes()); !status) return status;
  auto copies = own.finish();
  if (!copies) return std::unexpected(copies.error());
  for (std::size_t i = 0; i < copied.size(); ++i) blobs[copied[i]] = std::move((*copies)[i]);
  return {};
}

}  // namespace

BlobStore::BlobStore(Limits limits, DiskBlobCache* disk) : limits_(limits), disk_(disk) {}

void BlobStore::put(std::string_view tenant, const std::string& digest, Blob blob) {
  Key key{std::string(tenant), digest};
  {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      touch_locked(it->second);
      return;
    }
  }
  if (disk_ != nullptr) disk_->store(tenant, digest, blob);
  if (blob.size() > limits_.bytes / 4) return;  // one blob must not flush the working set
  if (keeps_others_alive(blob)) {
    auto copy = Blob::copy_of(blob.bytes());
    if (!copy) return;  // not kept; the request still has its own
    blob = std::move(*copy);
  }
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) {  // stored meanwhile
    touch_locked(it->second);
    return;
  }
  File& file = files_[blob.fd()];
  if (file.blobs++ == 0) {
    file.bytes = blob.file_size();
    size_bytes_ += file.bytes;
  }
  Usage& usage = usage_[key.tenant];
  usage.bytes += blob.size();
  ++usage.blobs;
  lru_.push_front(key);
  entries_.emplace(std::move(key), Entry{std::move(blob), 0, lru_.begin()});
  evict_locked();
}

void BlobStore::put_all(std::string_view tenant, BlobMap blobs) {
  // A request of 100,000 tiny blobs made 100,000 memfds, 33 µs each.
  std::vector<Blob*> packed;  // those put would copy each on its own
  {
    std::lock_guard lock(mutex_);
    Key key{std::string(tenant), {}};
    for (auto& [digest, blob] : blobs) {
      key.digest = digest;
      if (blob.size() < kSharedFileSlack && blob.size() <= limits_.bytes / 4 && keeps_others_alive(blob) &&
          !entries_.contains(key))
        packed.push_back(&blob);
    }
  }
  for (std::size_t first = 0; first < packed.size();) {
    BlobBuilder copies(BlobBuilder::kMappableFrom);  // a tensor's pages mappable on their own
    std::size_t last = first, bytes = 0;
    for (; last < packed.size() && bytes + packed[last]->size() <= kSharedFileSlack; ++last) {
      bytes += packed[last]->size();
      if (!copies.append(packed[last]->bytes())) break;
    }
    auto made = copies.finish();
    // Without them, put copies each on its own, or keeps none.
    for (std::size_t i = 0; made && i < made->size(); ++i) *packed[first + i] = std::move((*made)[i]);
    first = std::max(last, first + 1);
  }
  for (auto& [digest, blob] : blobs) put(tenant, digest, std::move(blob));
}

std::optional<Blob> BlobStore::get(std::string_view tenant, const std::string& digest) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(Key{std::string(tenant), digest});
  if (it == entries_.end()) return std::nullopt;
  touch_locked(it->second);
  return it->second.blob;
}

Result<BlobStore::Resolution> BlobStore::resolve(std::string_view tenant, const Program& program, BlobMap supplied,
                                                 const CopyBudget& budget) {
  Resolution resolution;
  Key key{std::string(tenant), {}};
  {
    std::lock_guard lock(mutex_);
    for (const std::string& digest : program.blobs()) {
      if (auto it = supplied.find(digest); it != supplied.end()) {
        resolution.blobs.emplace(digest, it->second);
        continue;
      }
      key.digest = digest;
      if (auto it = entries_.find(key); it != entries_.end()) {
        touch_locked(it->second);
        resolution.blobs.emplace(digest, it->second.blob);
      } else {
        resolution.missing.push_back(digest);
      }
    }
  }
  put_all(tenant, std::move(supplied));
  // What memory lacks, the tenant's part of the disk may still hold (from before a
  // restart, say).
  if (disk_ != nullptr) {
    std::optional<std::uint64_t> refused;
    std::erase_if(resolution.missing, [&](const std::string& digest) {
      if (refused) return false;
      std::optional<std::uint64_t> size = disk_->size_of(tenant, digest);
      if (!size) return false;
      if (budget && !budget(*size)) {
        refused = *size;
        return false;
      }
      std::optional<Blob> kept = disk_->load(tenant, digest);
      if (!kept) return false;
      resolution.blobs.emplace(digest, *kept);
      put(tenant, digest, std::move(*kept));
      return true;
    });
    if (refused) return std::unexpected(over_budget(*refused).error());
  }

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

  KCORAL_TRY(confine(resolution.blobs, budget));

  std::lock_guard lock(mutex_);
  resolution.pin.store_ = this;
  for (const auto& [digest, blob] : resolution.blobs) {
    key.digest = digest;
    if (auto it = entries_.find(key); it != entries_.end()) {
      pin_locked(it->second);
      resolution.pin.keys_.push_back(key);
    }
  }
  return resolution;
}

BlobStore::ToMake BlobStore::to_make(std::string_view tenant, const Program& program, const BlobMap& supplied) const {
  BlobMap found;
  std::vector<std::string> elsewhere;
  {
    Key key{std::string(tenant), {}};
    std::lock_guard lock(mutex_);
    for (const std::string& digest : program.blobs()) {
      key.digest = digest;
      if (auto it = supplied.find(digest); it != supplied.end()) found.emplace(digest, it->second);
      else if (auto entry = entries_.find(key); entry != entries_.end()) found.emplace(digest, entry->second.blob);
      else elsewhere.push_back(digest);
    }
  }
  ToMake made;
  if (disk_ != nullptr)
    for (const std::string& digest : elsewhere)
      if (auto size = disk_->size_of(tenant, digest)) {
        made.bytes += *size;
        ++made.blobs;
      }
  // confine's copies (a blob read back from the disk has a memfd of its own).
  std::unordered_map<int, std::size_t> used;
  for (const auto& [digest, blob] : found) ++used[blob.fd()];
  for (const auto& [digest, blob] : found)
    if (used[blob.fd()] != blob.file_parts()) made.bytes += blob.size();
  return made;
}

std::size_t BlobStore::size_bytes() const {
  std::lock_guard lock(mutex_);
  return size_bytes_;
}

std::size_t BlobStore::count() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::size_t BlobStore::files() const {
  std::lock_guard lock(mutex_);
  return files_.size();
}

BlobStore::Usage BlobStore::usage(std::string_view tenant) const {
  std::lock_guard lock(mutex_);
  auto it = usage_.find(std::string(tenant));
  return it == usage_.end() ? Usage{} : it->second;
}

void BlobStore::unpin(const std::vector<Key>& keys) {
  std::lock_guard lock(mutex_);
  for (const Key& key : keys) {
    if (auto it = entries_.find(key); it != entries_.end() && it->second.pins > 0) unpin_locked(it);
  }
  evict_locked();
}

// A pinned entry is out of the LRU list, so that eviction never walks past it (with a
// program's thousands of blobs pinned, each put walked them all); its last unpin puts it
// back, as the most recently used.
void BlobStore::pin_locked(Entry& entry) {
  if (entry.pins++ == 0) {
    lru_.erase(entry.lru);
    entry.lru = lru_.end();
  }
}

void BlobStore::unpin_locked(Entries::iterator entry) {
  if (--entry->second.pins == 0) {
    lru_.push_front(entry->first);
    entry->second.lru = lru_.begin();
  }
}

void BlobStore::touch_locked(Entry& entry) {
  if (entry.pins == 0) lru_.splice(lru_.begin(), lru_, entry.lru);
}

bool BlobStore::over_budget_locked() const {
  return size_bytes_ > limits_.bytes || entries_.size() > limits_.blobs || files_.size() > limits_.files;
}

void BlobStore::erase_locked(Entries::iterator entry) {
  auto file = files_.find(entry->second.blob.fd());
  if (--file->second.blobs == 0) {
    size_bytes_ -= file->second.bytes;
    files_.erase(file);
  }
  auto usage = usage_.find(entry->first.tenant);
  usage->second.bytes -= entry->second.blob.size();
  if (--usage->second.blobs == 0) usage_.erase(usage);
  entries_.erase(entry);
}

// Only unpinned entries are in lru_: each step evicts one.
void BlobStore::evict_locked() {
  while (over_budget_locked() && !lru_.empty()) {
    erase_locked(entries_.find(lru_.back()));
    lru_.pop_back();
  }
}

}  // namespace kcoral
