// LeaseManager (libkcoral/src/lease_manager.cpp): exclusive GPU leases, first come first
// served. A free GPU is granted in the acquiring call; a release hands it straight to the
// longest waiter in the releasing call; wait and hold times accumulate per holder; finish()
// forgets a holder everywhere; callbacks run outside the lock, so they may call back in.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "kcoral/lease_manager.hpp"

using namespace std::chrono_literals;
using kcoral::LeaseManager;

namespace {

// Runs `work` on a detached thread and says whether it finished within `limit` (a
// deadlock then fails the test instead of hanging the suite).
bool finishes_within(std::function<void()> work, std::chrono::milliseconds limit) {
  auto done = std::make_shared<std::promise<void>>();
  auto future = done->get_future();
  std::thread([work = std::move(work), done] {
    work();
    done->set_value();
  }).detach();
  return future.wait_for(limit) == std::future_status::ready;
}

}  // namespace

TEST_SUITE("lease_manager") {

TEST_CASE("a free GPU is granted within the acquiring call") {
  LeaseManager leases(1);
  CHECK(leases.gpu_count() == 1);
  bool granted = false;
  REQUIRE(leases.acquire(0, 7, [&] { granted = true; }).has_value());
  CHECK(granted);
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(7));
  CHECK(leases.waiting(0) == 0);
}

TEST_CASE("a busy GPU queues the holder until the lease is handed over in release") {
  LeaseManager leases(1);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  bool granted = false;
  REQUIRE(leases.acquire(0, 2, [&] { granted = true; }).has_value());
  CHECK_FALSE(granted);
  CHECK(leases.waiting(0) == 1);
  leases.release(0, 1);
  CHECK(granted);
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(2));
  CHECK(leases.waiting(0) == 0);
  leases.release(0, 2);
  CHECK_FALSE(leases.holder(0).has_value());
}

TEST_CASE("waiters are served in arrival order") {
  LeaseManager leases(1);
  std::vector<LeaseManager::HolderId> order;
  REQUIRE(leases.acquire(0, 1, [&] { order.push_back(1); }).has_value());
  for (LeaseManager::HolderId id : {5, 3, 9, 4})
    REQUIRE(leases.acquire(0, id, [&order, id] { order.push_back(id); }).has_value());
  CHECK(leases.waiting(0) == 4);
  for (LeaseManager::HolderId id : {1, 5, 3, 9, 4}) leases.release(0, id);
  CHECK(order == std::vector<LeaseManager::HolderId>{1, 5, 3, 9, 4});
}

TEST_CASE("the lease goes directly to the longest waiter; nobody can slip in between") {
  LeaseManager leases(1);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  std::optional<LeaseManager::HolderId> holder_seen_by_callback;
  REQUIRE(leases.acquire(0, 2, [&] { holder_seen_by_callback = leases.holder(0); }).has_value());
  leases.release(0, 1);
  CHECK(holder_seen_by_callback == std::optional<LeaseManager::HolderId>(2));
  // A newcomer after the handoff queues behind the new holder.
  bool newcomer = false;
  REQUIRE(leases.acquire(0, 3, [&] { newcomer = true; }).has_value());
  CHECK_FALSE(newcomer);
}

TEST_CASE("asking twice for one GPU, as holder or as waiter, is an error") {
  LeaseManager leases(1);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  auto again = leases.acquire(0, 1, [] {});
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().kind == kcoral::ErrorKind::engine);
  REQUIRE(leases.acquire(0, 2, [] {}).has_value());
  CHECK_FALSE(leases.acquire(0, 2, [] {}).has_value());
  CHECK(leases.waiting(0) == 1);
}

TEST_CASE("an unknown GPU is an error and releasing it does nothing") {
  LeaseManager leases(2);
  auto status = leases.acquire(2, 1, [] { FAIL("granted a GPU that does not exist"); });
  REQUIRE_FALSE(status.has_value());
  CHECK(status.error().kind == kcoral::ErrorKind::engine);
  leases.release(5, 1);
  CHECK_FALSE(leases.holder(9).has_value());
  CHECK(leases.waiting(9) == 0);
}

TEST_CASE("GPUs are leased independently") {
  LeaseManager leases(2);
  int grants = 0;
  REQUIRE(leases.acquire(0, 1, [&] { ++grants; }).has_value());
  REQUIRE(leases.acquire(1, 2, [&] { ++grants; }).has_value());
  REQUIRE(leases.acquire(1, 1, [&] { ++grants; }).has_value());  // one holder, two GPUs
  CHECK(grants == 2);
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(1));
  CHECK(leases.holder(1) == std::optional<LeaseManager::HolderId>(2));
  leases.release(1, 2);
  CHECK(grants == 3);
}

TEST_CASE("a waiter that releases leaves the queue and is never granted") {
  LeaseManager leases(1);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  bool granted = false;
  REQUIRE(leases.acquire(0, 2, [&] { granted = true; }).has_value());
  leases.release(0, 2);
  CHECK(leases.waiting(0) == 0);
  leases.release(0, 1);
  CHECK_FALSE(granted);
  CHECK_FALSE(leases.holder(0).has_value());
  // A release by a stranger changes nothing.
  REQUIRE(leases.acquire(0, 3, [] {}).has_value());
  leases.release(0, 99);
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(3));
}

TEST_CASE("wait and hold times accumulate per holder") {
  LeaseManager leases(1);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  REQUIRE(leases.acquire(0, 2, [] {}).has_value());
  std::this_thread::sleep_for(60ms);
  leases.release(0, 1);
  std::this_thread::sleep_for(30ms);
  leases.release(0, 2);
  kcoral::LeaseTimes first = leases.times(1);
  kcoral::LeaseTimes second = leases.times(2);
  CHECK(first.held_ms >= 60);
  CHECK(first.wait_ms == 0);
  CHECK(second.wait_ms >= 60);
  CHECK(second.held_ms >= 30);
  CHECK(second.held_ms < 5000);
  // A second round adds to the first.
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  std::this_thread::sleep_for(20ms);
  leases.release(0, 1);
  CHECK(leases.times(1).held_ms >= first.held_ms + 20);
  CHECK(leases.times(42).held_ms == 0);
}

TEST_CASE("finish releases what a holder holds, hands it on and returns its times") {
  LeaseManager leases(2);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  bool granted = false;
  REQUIRE(leases.acquire(0, 2, [&] { granted = true; }).has_value());
  std::this_thread::sleep_for(20ms);
  kcoral::LeaseTimes times = leases.finish(1);
  CHECK(times.held_ms >= 20);
  CHECK(granted);
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(2));
  // Forgotten: no times are left for it.
  CHECK(leases.times(1).held_ms == 0);
  CHECK(leases.finish(1).held_ms == 0);
}

TEST_CASE("finish removes a waiter from every queue") {
  LeaseManager leases(2);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  REQUIRE(leases.acquire(1, 1, [] {}).has_value());
  bool granted = false;
  REQUIRE(leases.acquire(0, 2, [&] { granted = true; }).has_value());
  REQUIRE(leases.acquire(1, 2, [&] { granted = true; }).has_value());
  std::this_thread::sleep_for(20ms);
  kcoral::LeaseTimes times = leases.finish(2);
  CHECK(times.wait_ms >= 40);  // 20 ms in each of two queues
  CHECK(leases.waiting(0) == 0);
  CHECK(leases.waiting(1) == 0);
  leases.finish(1);
  CHECK_FALSE(granted);
  CHECK_FALSE(leases.holder(0).has_value());
  CHECK_FALSE(leases.holder(1).has_value());
}

TEST_CASE("a granted callback may call back into the manager without deadlock") {
  LeaseManager leases(1);
  bool second_granted = false;
  // Granted at once: the callback releases in the acquiring call.
  CHECK(finishes_within([&] { (void)leases.acquire(0, 1, [&] { leases.release(0, 1); }); }, 2000ms));
  CHECK_FALSE(leases.holder(0).has_value());
  // Granted by a handoff: the callback queries and acquires the next GPU lease.
  REQUIRE(leases.acquire(0, 2, [] {}).has_value());
  REQUIRE(leases.acquire(0, 3, [&] {
    second_granted = true;
    (void)leases.times(3);
    (void)leases.waiting(0);
    leases.release(0, 3);
  }).has_value());
  CHECK(finishes_within([&] { leases.release(0, 2); }, 2000ms));
  CHECK(second_granted);
  CHECK_FALSE(leases.holder(0).has_value());
}

TEST_CASE("holders on many threads never share a GPU") {
  LeaseManager leases(1);
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> completed{0};
  std::vector<std::thread> threads;
  for (LeaseManager::HolderId id = 1; id <= 8; ++id) {
    threads.emplace_back([&, id] {
      for (int round = 0; round < 50; ++round) {
        std::promise<void> granted;
        auto ready = granted.get_future();
        if (!leases.acquire(0, id, [&] { granted.set_value(); })) {
          overlaps.fetch_add(1);  // counted as a failure; assertions stay on the main thread
          continue;
        }
        ready.wait();
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        std::this_thread::yield();
        inside.fetch_sub(1);
        leases.release(0, id);
        completed.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(overlaps.load() == 0);
  CHECK(completed.load() == 400);
  CHECK_FALSE(leases.holder(0).has_value());
}

}  // TEST_SUITE
