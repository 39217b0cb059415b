// UserIdPool: the outside user ids that sandboxed workers run as, one per live worker.
//
// The kernel counts much per user rather than per process: processes (RLIMIT_NPROC),
// inotify instances and watches, user namespaces, pipe buffer pages, message queue
// bytes. Were every sandbox one user, one program could use up such a count for all the
// others (and were the user root, for the host too). So each worker takes an id of its
// own from the operator's range (--sandbox-uid-range; the same number is its group id)
// when it is forked, and gives it back once its namespace is gone. Ids are handed out
// in turn from where the last one was taken, so that an id just given back is not the
// next one taken, and servers sharing a range rarely pick the same one (each should have
// a range of its own).
//
// Not thread-safe; the zygote's.
//
//   UserIdPool pool(first, last, start);
//   std::optional<uid_t> uid = pool.take();   // nullopt: every id is in use
//   pool.give_back(*uid);
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "kcoral/error.hpp"

namespace kcoral {

class UserIdPool {
 public:
  // Ids `first` to `last`, both included; the first one taken is `start` (clamped in).
  UserIdPool(uid_t first, uid_t last, uid_t start);

  [[nodiscard]] std::optional<uid_t> take();
  void give_back(uid_t id);
  [[nodiscard]] std::uint64_t size() const { return std::uint64_t{last_} - first_ + 1; }
  [[nodiscard]] std::size_t in_use() const { return taken_.size(); }

 private:
  uid_t first_;
  uid_t last_;
  uid_t next_;
  std::set<uid_t> taken_;
};

// FIRST-LAST, as --sandbox-uid-range takes it: decimal ids, 1 <= FIRST <= LAST <= 2^32 - 2
// (never root, never the invalid -1).
[[nodiscard]] Result<std::pair<uid_t, uid_t>> parse_id_range(std::string_view text);

}  // namespace kcoral
