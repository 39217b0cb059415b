// LeaseBroker (kcoral-server/front/lease_broker.cpp): the program lease goes to one worker
// at a time, first come first served, straight to the next waiter on release; context
// turns are handed out up to the bound and then in order; finish takes back what a worker
// holds or waits for, of both kinds. A worker of several GPUs waits until all of them are
// free and then holds them together; its context turn comes at once, taking no GPU's.
#include <doctest/doctest.h>

#include <vector>

#include "lease_broker.hpp"

TEST_SUITE("lease_broker") {

TEST_CASE("the program lease is one worker's at a time, handed to waiters in order") {
  kcoral::LeaseBroker broker(1, 1);
  std::vector<pid_t> granted;
  auto grant_to = [&](pid_t pid) { return [&granted, pid] { granted.push_back(pid); }; };
  REQUIRE(broker.acquire_program({0}, 11, grant_to(11)).has_value());
  REQUIRE(broker.acquire_program({0}, 12, grant_to(12)).has_value());
  REQUIRE(broker.acquire_program({0}, 13, grant_to(13)).has_value());
  CHECK(granted == std::vector<pid_t>{11});
  CHECK(broker.program_holder({0}, 0) == 11);
  broker.release_program(11);
  CHECK(granted == std::vector<pid_t>{11, 12});
  (void)broker.finish({0}, 13);  // a waiter that died leaves the queue
  broker.release_program(12);
  CHECK(granted == std::vector<pid_t>{11, 12});
  CHECK(!broker.program_holder({0}, 0).has_value());
}

TEST_CASE("a worker cannot queue twice for the program lease") {
  kcoral::LeaseBroker broker(1, 1);
  REQUIRE(broker.acquire_program({0}, 11, [] {}).has_value());
  CHECK(!broker.acquire_program({0}, 11, [] {}).has_value());
}

TEST_CASE("context turns: up to the bound at once, the rest in order as turns come back") {
  kcoral::LeaseBroker broker(2, 2);
  std::vector<pid_t> granted;
  for (pid_t pid : {1, 2, 3, 4}) broker.acquire_init({0}, pid, [&granted, pid] { granted.push_back(pid); });
  broker.acquire_init({1}, 9, [&granted] { granted.push_back(9); });  // another GPU's own turns
  CHECK(granted == std::vector<pid_t>{1, 2, 9});
  broker.release_init({0}, 2);
  CHECK(granted == std::vector<pid_t>{1, 2, 9, 3});
  (void)broker.finish({0}, 4);  // leaves the queue without a turn
  broker.release_init({0}, 1);
  broker.release_init({0}, 3);
  CHECK(granted == std::vector<pid_t>{1, 2, 9, 3});
}

TEST_CASE("finish takes back a held program lease and a held turn, and reports the lease times") {
  kcoral::LeaseBroker broker(1, 1);
  bool next = false, next_turn = false;
  REQUIRE(broker.acquire_program({0}, 11, [] {}).has_value());
  broker.acquire_init({0}, 11, [] {});
  REQUIRE(broker.acquire_program({0}, 12, [&] { next = true; }).has_value());
  broker.acquire_init({0}, 12, [&] { next_turn = true; });
  kcoral::LeaseTimes times = broker.finish({0}, 11);
  CHECK(times.held_ms >= 0);
  CHECK(next);
  CHECK(next_turn);
}

TEST_CASE("a worker of several GPUs waits for a one-GPU holder of any of them, and gets them all on its release") {
  kcoral::LeaseBroker broker(4, 1);
  std::vector<pid_t> granted;
  auto grant_to = [&](pid_t pid) { return [&granted, pid] { granted.push_back(pid); }; };
  REQUIRE(broker.acquire_program({1}, 11, grant_to(11)).has_value());        // one GPU of the set
  REQUIRE(broker.acquire_program({0, 1}, 20, grant_to(20)).has_value());     // the set worker
  REQUIRE(broker.acquire_program({2}, 12, grant_to(12)).has_value());        // another GPU: not held up
  CHECK(granted == std::vector<pid_t>{11, 12});
  CHECK(!broker.program_holder({0}, 0).has_value());  // nothing of the set is held while it waits
  REQUIRE(broker.acquire_program({0}, 13, grant_to(13)).has_value());  // behind the set on GPU 0
  broker.release_program(11);
  CHECK(granted == std::vector<pid_t>{11, 12, 20});
  CHECK(broker.program_holder({0}, 0) == 20);
  CHECK(broker.program_holder({1}, 0) == 20);
  (void)broker.finish({0, 1}, 20);  // everything back at once
  CHECK(granted == std::vector<pid_t>{11, 12, 20, 13});
  CHECK(!broker.program_holder({1}, 0).has_value());
}

TEST_CASE("program_holder over a set: the holder of any of its GPUs other than the worker asking") {
  kcoral::LeaseBroker broker(4, 1);
  REQUIRE(broker.acquire_program({0, 1}, 20, [] {}).has_value());
  REQUIRE(broker.acquire_program({3}, 12, [] {}).has_value());
  CHECK(!broker.program_holder({0, 1}, 20).has_value());  // itself only
  CHECK(broker.program_holder({2, 3}, 20) == 12);
  CHECK(broker.program_holder({1, 2}, 12) == 20);
  CHECK(broker.program_holder({0, 3}, 12) == 20);  // the first other holder, by GPU
  CHECK(!broker.program_holder({2}, 0).has_value());
}

TEST_CASE("a worker of several GPUs is granted its context turn at once, taking none of its GPUs' turns") {
  kcoral::LeaseBroker broker(2, 1);
  std::vector<pid_t> granted;
  broker.acquire_init({0}, 1, [&granted] { granted.push_back(1); });  // GPU 0's one turn
  broker.acquire_init({0, 1}, 20, [&granted] { granted.push_back(20); });
  CHECK(granted == std::vector<pid_t>{1, 20});
  broker.acquire_init({1}, 2, [&granted] { granted.push_back(2); });  // GPU 1's turn is still free
  CHECK(granted == std::vector<pid_t>{1, 20, 2});
  broker.release_init({0, 1}, 20);  // gives back no GPU's turn
  broker.acquire_init({0}, 3, [&granted] { granted.push_back(3); });
  CHECK(granted == std::vector<pid_t>{1, 20, 2});
  broker.release_init({0}, 1);
  CHECK(granted == std::vector<pid_t>{1, 20, 2, 3});
}

}  // TEST_SUITE
