// UserIdPool: next fit in a circular range.
#include "user_id_pool.hpp"

#include <algorithm>
#include <charconv>
#include <string>

namespace kcoral {

UserIdPool::UserIdPool(uid_t first, uid_t last, uid_t start)
    : first_(std::min(first, last)), last_(std::max(first, last)), next_(std::clamp(start, first_, last_)) {}

std::optional<uid_t> UserIdPool::take() {
  if (taken_.size() >= size()) return std::nullopt;
  while (taken_.contains(next_)) next_ = next_ == last_ ? first_ : next_ + 1;
  uid_t id = next_;
  taken_.insert(id);
  next_ = next_ == last_ ? first_ : next_ + 1;
  return id;
}

void UserIdPool::give_back(uid_t id) { taken_.erase(id); }

Result<std::pair<uid_t, uid_t>> parse_id_range(std::string_view text) {
  auto number = [](std::string_view digits) -> std::optional<std::uint64_t> {
    std::uint64_t value = 0;
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::nullopt;
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return value;
  };
  std::size_t dash = text.find('-');
  auto first = dash == std::string_view::npos ? std::nullopt : number(text.substr(0, dash));
  auto last = dash == std::string_view::npos ? std::nullopt : number(text.substr(dash + 1));
  if (!first || !last || *first < 1 || *first > *last || *last > 4294967294u)
    return fail(ErrorKind::parse, "expected FIRST-LAST with 1 <= FIRST <= LAST <= 4294967294, not '" +
                                      std::string(text.substr(0, 64)) + "'");
  return std::pair{static_cast<uid_t>(*first), static_cast<uid_t>(*last)};
}

}  // namespace kcoral
