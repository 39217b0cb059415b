// LeaseBroker (kcoral-server/front/lease_broker.cpp): the program lease goes to one worker
// at a time, first come first served, straight to the next waiter on release; context
// turns are handed out up to the bound and then in order; finish takes back what a worker
// holds or waits for, of both kinds.
#include <doctest/doctest.h>

#include <vector>

#include "lease_broker.hpp"

TEST_SUITE("lease_broker") {

TEST_CASE("the program lease is one worker's at a time, handed to waiters in order") {
  kcoral::LeaseBroker broker(1, 1);
  std::vector<pid_t> granted;
  auto grant_to = [&](pid_t pid) { return [&granted, pid] { granted.push_back(pid); }; };
  REQUIRE(broker.acquire_program(0, 11, grant_to(11)).has_value());
  REQUIRE(broker.acquire_program(0, 12, grant_to(12)).has_value());
  REQUIRE(broker.acquire_program(0, 13, grant_to(13)).has_value());
  CHECK(granted == std::vector<pid_t>{11});
  CHECK(broker.program_holder(0) == 11);
  broker.release_program(11);
  CHECK(granted == std::vector<pid_t>{11, 12});
  (void)broker.finish(0, 13);  // a waiter that died leaves the queue
  broker.release_program(12);
  CHECK(granted == std::vector<pid_t>{11, 12});
  CHECK(!broker.program_holder(0).has_value());
}

TEST_CASE("a worker cannot queue twice for the program lease") {
  kcoral::LeaseBroker broker(1, 1);
  REQUIRE(broker.acquire_program(0, 11, [] {}).has_value());
  CHECK(!broker.acquire_program(0, 11, [] {}).has_value());
}

TEST_CASE("context turns: up to the bound at once, the rest in order as turns come back") {
  kcoral::LeaseBroker broker(2, 2);
  std::vector<pid_t> granted;
  for (pid_t pid : {1, 2, 3, 4}) broker.acquire_init(0, pid, [&granted, pid] { granted.push_back(pid); });
  broker.acquire_init(1, 9, [&granted] { granted.push_back(9); });  // another GPU's own turns
  CHECK(granted == std::vector<pid_t>{1, 2, 9});
  broker.release_init(0, 2);
  CHECK(granted == std::vector<pid_t>{1, 2, 9, 3});
  (void)broker.finish(0, 4);  // leaves the queue without a turn
  broker.release_init(0, 1);
  broker.release_init(0, 3);
  CHECK(granted == std::vector<pid_t>{1, 2, 9, 3});
}

TEST_CASE("finish takes back a held program lease and a held turn, and reports the lease times") {
  kcoral::LeaseBroker broker(1, 1);
  bool next = false, next_turn = false;
  REQUIRE(broker.acquire_program(0, 11, [] {}).has_value());
  broker.acquire_init(0, 11, [] {});
  REQUIRE(broker.acquire_program(0, 12, [&] { next = true; }).has_value());
  broker.acquire_init(0, 12, [&] { next_turn = true; });
  kcoral::LeaseTimes times = broker.finish(0, 11);
  CHECK(times.held_ms >= 0);
  CHECK(next);
  CHECK(next_turn);
}

}  // TEST_SUITE
