// AnonymousConnections: the connection slots of clients that have shown no token yet, on
// a server that needs one, kept apart from those that have.
//
// Whoever reaches the port may connect, and until a request shows an accepted token the
// server cannot tell a client from an attacker holding slots with idle connections or
// `GET /health`. So such connections are bounded twice: at most `per_address` from one
// address (a further one is refused at once), and at most `total` in all, where the
// longest-held is closed to make room for a newcomer. A client with a token shows it in its
// first request, within a round trip of connecting, and leaves the pool; an attacker with
// many addresses churns the pool but cannot keep a newcomer out, nor touch the slots of
// connections that have shown a token. Thread-safe.
//
//   auto ticket = pool.admit(address, [weak] { close it on its strand });
//   if (!ticket) return refuse();
//   ... a request shows an accepted token: ticket->leave();
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace kcoral {

class AnonymousConnections {
  struct Entry;

 public:
  // A connection's place in the pool; leaving (or destruction) gives it back.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept : pool_(std::exchange(other.pool_, nullptr)), entry_(std::move(other.entry_)) {}
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { leave(); }
    void leave();
    [[nodiscard]] bool held() const { return pool_ != nullptr; }

   private:
    friend class AnonymousConnections;
    Ticket(AnonymousConnections* pool, std::shared_ptr<Entry> entry) : pool_(pool), entry_(std::move(entry)) {}
    AnonymousConnections* pool_ = nullptr;
    std::shared_ptr<Entry> entry_;
  };

  AnonymousConnections(std::size_t total, std::size_t per_address) : total_(total), per_address_(per_address) {}
  AnonymousConnections(const AnonymousConnections&) = delete;
  AnonymousConnections& operator=(const AnonymousConnections&) = delete;

  // A connection from `address` joins; `evict` closes it should a newcomer need its place
  // (called once at most, on the admitting thread, outside the pool's lock). nullopt: its
  // address holds `per_address` already.
  [[nodiscard]] std::optional<Ticket> admit(const std::string& address, std::function<void()> evict);

  [[nodiscard]] std::size_t size() const;
  [[nodiscard]] std::size_t total() const { return total_; }
  [[nodiscard]] std::size_t per_address() const { return per_address_; }

 private:
  struct Entry {
    std::string address;
    std::function<void()> evict;
    bool listed = false;
    std::list<std::shared_ptr<Entry>>::iterator where;
  };
  void unlist_locked(Entry& entry);

  const std::size_t total_;
  const std::size_t per_address_;
  mutable std::mutex mutex_;
  std::list<std::shared_ptr<Entry>> entries_;  // oldest first
  std::unordered_map<std::string, std::size_t> per_address_count_;
};

}  // namespace kcoral
