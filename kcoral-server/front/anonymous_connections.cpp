// AnonymousConnections: admission by address, eviction of the longest-held.
#include "anonymous_connections.hpp"

namespace kcoral {

AnonymousConnections::Ticket& AnonymousConnections::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    leave();
    pool_ = std::exchange(other.pool_, nullptr);
    entry_ = std::move(other.entry_);
  }
  return *this;
}

void AnonymousConnections::Ticket::leave() {
  if (pool_ == nullptr) return;
  {
    std::lock_guard lock(pool_->mutex_);
    if (entry_->listed) pool_->unlist_locked(*entry_);
  }
  pool_ = nullptr;
  entry_.reset();
}

void AnonymousConnections::unlist_locked(Entry& entry) {
  entries_.erase(entry.where);
  entry.listed = false;
  if (--per_address_count_[entry.address] == 0) per_address_count_.erase(entry.address);
}

std::optional<AnonymousConnections::Ticket> AnonymousConnections::admit(const std::string& address,
                                                                         std::function<void()> evict) {
  std::function<void()> evicted;
  auto entry = std::make_shared<Entry>();
  {
    std::lock_guard lock(mutex_);
    auto count = per_address_count_.find(address);
    if (total_ == 0 || (count != per_address_count_.end() && count->second >= per_address_)) return std::nullopt;
    if (entries_.size() >= total_) {
      std::shared_ptr<Entry> oldest = entries_.front();
      unlist_locked(*oldest);
      evicted = std::move(oldest->evict);
    }
    entry->address = address;
    entry->evict = std::move(evict);
    entry->listed = true;
    entry->where = entries_.insert(entries_.end(), entry);
    ++per_address_count_[address];
  }
  if (evicted) evicted();
  return Ticket(this, std::move(entry));
}

std::size_t AnonymousConnections::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace kcoral
