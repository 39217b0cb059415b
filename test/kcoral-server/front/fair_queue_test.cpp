// FairQueue (kcoral-server/front/fair_queue.hpp): each tenant's items in their order; the
// next from the tenant with the fewest running, ties to the one served longest ago, so one
// tenant's many queued items never make another's wait behind all of them; a tenant's cap
// on waiting items; items put back first again; take and take_all; peek shows what pop
// would return and leaves it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "fair_queue.hpp"

namespace {

// Items are "<tenant>:<n>".
std::string item(std::size_t tenant, int n) { return std::to_string(tenant) + ":" + std::to_string(n); }

std::size_t tenant_of(const std::string& item) { return std::stoul(item.substr(0, item.find(':'))); }

}  // namespace

TEST_SUITE("fair_queue") {

TEST_CASE("one tenant's items come in their order") {
  kcoral::FairQueue<std::string> queue(1, 100);
  for (int n = 0; n < 5; ++n) REQUIRE(queue.push(0, item(0, n)));
  CHECK(queue.size() == 5);
  for (int n = 0; n < 5; ++n) CHECK(queue.pop() == item(0, n));
  CHECK_FALSE(queue.pop().has_value());
  CHECK(queue.empty());
  CHECK(queue.running(0) == 5);
}

TEST_CASE("a tenant that queued a hundred does not keep another waiting behind them") {
  // Two workers. Tenant 0 queues 100, then tenant 1 queues one: it is the next to start
  // when a worker comes free, not the 99th.
  kcoral::FairQueue<std::string> queue(2, 1000);
  for (int n = 0; n < 100; ++n) REQUIRE(queue.push(0, item(0, n)));
  CHECK(queue.pop() == item(0, 0));
  CHECK(queue.pop() == item(0, 1));
  REQUIRE(queue.push(1, item(1, 0)));
  queue.finished(0);  // a worker comes free
  CHECK(queue.pop() == item(1, 0));
  CHECK(queue.waiting(0) == 98);
  CHECK(queue.waiting(1) == 0);
}

TEST_CASE("busy tenants share the workers: the one with fewer running goes first") {
  kcoral::FairQueue<std::string> queue(3, 1000);
  for (int n = 0; n < 10; ++n) {
    REQUIRE(queue.push(0, item(0, n)));
    REQUIRE(queue.push(1, item(1, n)));
    REQUIRE(queue.push(2, item(2, n)));
  }
  // Six workers fill up two per tenant, whatever the order they were queued in.
  std::vector<std::size_t> started(3, 0);
  for (int worker = 0; worker < 6; ++worker) ++started[tenant_of(*queue.pop())];
  CHECK(started == std::vector<std::size_t>{2, 2, 2});
  // Tenant 2 finishes one: its next goes first, though others were served longer ago.
  queue.finished(2);
  CHECK(tenant_of(*queue.pop()) == 2);
  // Among equals the one served longest ago: tenants 0 and 1 finish one each, 0 first.
  queue.finished(0);
  queue.finished(1);
  CHECK(tenant_of(*queue.pop()) == 0);
  CHECK(tenant_of(*queue.pop()) == 1);
}

TEST_CASE("among tenants with as many running, the one served longest ago goes first (round robin)") {
  kcoral::FairQueue<std::string> queue(3, 1000);
  for (int n = 0; n < 4; ++n)
    for (std::size_t tenant = 0; tenant < 3; ++tenant) REQUIRE(queue.push(tenant, item(tenant, n)));
  std::vector<std::size_t> order;
  for (int i = 0; i < 9; ++i) {
    std::string next = *queue.pop();
    order.push_back(tenant_of(next));
    queue.finished(tenant_of(next));  // one worker: each ends before the next starts
  }
  CHECK(order == std::vector<std::size_t>{0, 1, 2, 0, 1, 2, 0, 1, 2});
}

TEST_CASE("a tenant with its most waiting is refused; others are not, and it may queue again later") {
  kcoral::FairQueue<std::string> queue(2, 3);
  for (int n = 0; n < 3; ++n) REQUIRE(queue.push(0, item(0, n)));
  CHECK_FALSE(queue.push(0, item(0, 3)));
  CHECK(queue.push(1, item(1, 0)));
  CHECK(queue.waiting(0) == 3);
  CHECK(queue.pop() == item(0, 0));  // running items do not count against the cap
  CHECK(queue.push(0, item(0, 4)));
  CHECK_FALSE(queue.push(0, item(0, 5)));
}

TEST_CASE("an item put back is first in its tenant's queue again, not running, and never refused") {
  kcoral::FairQueue<std::string> queue(1, 2);
  REQUIRE(queue.push(0, item(0, 0)));
  REQUIRE(queue.push(0, item(0, 1)));
  std::string started = *queue.pop();
  CHECK(queue.running(0) == 1);
  REQUIRE(queue.push(0, item(0, 2)));
  queue.put_back(0, started);  // over the cap: taken all the same
  CHECK(queue.running(0) == 0);
  CHECK(queue.waiting(0) == 3);
  CHECK(queue.pop() == item(0, 0));
}

TEST_CASE("take removes one waiting item of a tenant; take_all empties every queue") {
  kcoral::FairQueue<std::string> queue(2, 10);
  for (int n = 0; n < 3; ++n) {
    REQUIRE(queue.push(0, item(0, n)));
    REQUIRE(queue.push(1, item(1, n)));
  }
  CHECK(queue.take(0, [](const std::string& it) { return it == "0:1"; }) == "0:1");
  CHECK_FALSE(queue.take(0, [](const std::string& it) { return it == "1:1"; }).has_value());
  CHECK(queue.size() == 5);
  std::vector<std::string> all = queue.take_all();
  CHECK(all == std::vector<std::string>{"0:0", "0:2", "1:0", "1:1", "1:2"});
  CHECK(queue.empty());
  CHECK_FALSE(queue.pop().has_value());
}

TEST_CASE("peek shows the item pop would return, and leaves it in place") {
  kcoral::FairQueue<std::string> queue(2, 10);
  CHECK(queue.peek() == nullptr);
  REQUIRE(queue.push(0, item(0, 0)));
  REQUIRE(queue.push(0, item(0, 1)));
  CHECK(queue.pop() == item(0, 0));  // tenant 0 has one running now
  REQUIRE(queue.push(1, item(1, 0)));
  REQUIRE(queue.peek() != nullptr);
  CHECK(*queue.peek() == item(1, 0));  // the tenant with fewer running, not the first queued
  CHECK(queue.size() == 2);
  CHECK(queue.pop() == item(1, 0));
  CHECK(*queue.peek() == item(0, 1));
}

}  // TEST_SUITE
