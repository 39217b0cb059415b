// AnonymousConnections (kcoral-server/front/anonymous_connections.cpp): connections without
// a token, bounded per address (refused past it) and in all (the longest-held evicted).
#include <doctest/doctest.h>

#include <vector>

#include "anonymous_connections.hpp"

using kcoral::AnonymousConnections;

TEST_CASE("one address holds at most its share; a ticket given back frees its place") {
  AnonymousConnections pool(100, 2);
  auto a = pool.admit("10.0.0.1", [] {});
  auto b = pool.admit("10.0.0.1", [] {});
  REQUIRE(a);
  REQUIRE(b);
  CHECK_FALSE(pool.admit("10.0.0.1", [] {}));
  CHECK(pool.admit("10.0.0.2", [] {}));  // another address is not affected (and leaves at once)
  a->leave();
  CHECK_FALSE(a->held());
  CHECK(pool.size() == 1);
  auto c = pool.admit("10.0.0.1", [] {});
  CHECK(c);
  CHECK(pool.size() == 2);
}

TEST_CASE("a full pool evicts its longest-held connection for a newcomer, once") {
  AnonymousConnections pool(3, 10);
  std::vector<int> evicted;
  std::vector<AnonymousConnections::Ticket> tickets;
  for (int i = 0; i < 3; ++i) tickets.push_back(*pool.admit("10.0.0." + std::to_string(i), [&, i] { evicted.push_back(i); }));
  CHECK(evicted.empty());
  tickets.push_back(*pool.admit("10.0.0.9", [&] { evicted.push_back(9); }));
  CHECK(evicted == std::vector<int>{0});
  CHECK(pool.size() == 3);
  tickets[0].leave();  // the evicted one leaving again changes nothing
  CHECK(pool.size() == 3);
  // One that leaves (it showed a token) is never evicted afterwards.
  tickets[1].leave();
  tickets.push_back(*pool.admit("10.0.0.8", [] {}));
  tickets.push_back(*pool.admit("10.0.0.7", [] {}));
  CHECK(evicted == std::vector<int>{0, 2});
  CHECK(pool.size() == 3);
}

TEST_CASE("an evicted address's share is given back") {
  AnonymousConnections pool(1, 1);
  auto first = pool.admit("10.0.0.1", [] {});
  auto second = pool.admit("10.0.0.2", [] {});  // evicts the first
  REQUIRE(second);
  CHECK(pool.admit("10.0.0.1", [] {}));  // its address may come again (evicting the second)
}
