// LeaseManager (libkcoral/src/lease_manager.cpp): exclusive leases of GPU sets, first come
// first served. A set is granted whole or not at all; free GPUs are granted in the acquiring
// call; a release hands them straight to the waiters in the releasing call; earlier waiters
// reserve their GPUs against later requests, which may still go ahead on other GPUs; wait and
// hold times accumulate per holder; finish() forgets a holder everywhere; callbacks run
// outside the lock, so they may call back in. Inventories are made up (one to four GPUs).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

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
  CHECK(leases.held(7) == std::vector<std::size_t>{0});
  CHECK(leases.waiting(0) == 0);
}

TEST_CASE("a busy GPU queues the holder until the lease is handed over in release") {
  LeaseManager leases(1);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  bool granted = false;
  REQUIRE(leases.acquire(0, 2, [&] { granted = true; }).has_value());
  CHECK_FALSE(granted);
  CHECK(leases.waiting(0) == 1);
  leases.release(1);
  CHECK(granted);
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(2));
  CHECK(leases.waiting(0) == 0);
  leases.release(2);
  CHECK_FALSE(leases.holder(0).has_value());
}

TEST_CASE("waiters are served in arrival order") {
  LeaseManager leases(1);
  std::vector<LeaseManager::HolderId> order;
  REQUIRE(leases.acquire(0, 1, [&] { order.push_back(1); }).has_value());
  for (LeaseManager::HolderId id : {5, 3, 9, 4})
    REQUIRE(leases.acquire(0, id, [&order, id] { order.push_back(id); }).has_value());
  CHECK(leases.waiting(0) == 4);
  for (LeaseManager::HolderId id : {1, 5, 3, 9, 4}) leases.release(id);
  CHECK(order == std::vector<LeaseManager::HolderId>{1, 5, 3, 9, 4});
}

TEST_CASE("the lease goes directly to the longest waiter; nobody can slip in between") {
  LeaseManager leases(1);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  std::optional<LeaseManager::HolderId> holder_seen_by_callback;
  REQUIRE(leases.acquire(0, 2, [&] { holder_seen_by_callback = leases.holder(0); }).has_value());
  leases.release(1);
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

TEST_CASE("an unknown GPU is an error and its holder has nothing to release") {
  LeaseManager leases(2);
  auto status = leases.acquire(2, 1, [] { FAIL("granted a GPU that does not exist"); });
  REQUIRE_FALSE(status.has_value());
  CHECK(status.error().kind == kcoral::ErrorKind::engine);
  leases.release(1);
  CHECK(leases.held(1).empty());
  CHECK_FALSE(leases.holder(9).has_value());
  CHECK(leases.waiting(9) == 0);
}

TEST_CASE("GPUs are leased independently") {
  LeaseManager leases(2);
  int grants = 0;
  REQUIRE(leases.acquire(0, 1, [&] { ++grants; }).has_value());
  REQUIRE(leases.acquire(1, 2, [&] { ++grants; }).has_value());
  REQUIRE(leases.acquire(1, 3, [&] { ++grants; }).has_value());  // waits for GPU 1 only
  CHECK(grants == 2);
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(1));
  CHECK(leases.holder(1) == std::optional<LeaseManager::HolderId>(2));
  CHECK(leases.waiting(0) == 0);
  leases.release(2);
  CHECK(grants == 3);
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(1));
  CHECK(leases.holder(1) == std::optional<LeaseManager::HolderId>(3));
}

TEST_CASE("a waiter that releases leaves the queue and is never granted") {
  LeaseManager leases(1);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  bool granted = false;
  REQUIRE(leases.acquire(0, 2, [&] { granted = true; }).has_value());
  leases.release(2);
  CHECK(leases.waiting(0) == 0);
  leases.release(1);
  CHECK_FALSE(granted);
  CHECK_FALSE(leases.holder(0).has_value());
  // A release by a stranger changes nothing.
  REQUIRE(leases.acquire(0, 3, [] {}).has_value());
  leases.release(99);
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(3));
}

TEST_CASE("wait and hold times accumulate per holder") {
  LeaseManager leases(1);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  REQUIRE(leases.acquire(0, 2, [] {}).has_value());
  std::this_thread::sleep_for(60ms);
  leases.release(1);
  std::this_thread::sleep_for(30ms);
  leases.release(2);
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
  leases.release(1);
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

TEST_CASE("finish removes a waiter from the queue") {
  LeaseManager leases(2);
  REQUIRE(leases.acquire({0, 1}, 1, [] {}).has_value());
  bool granted = false;
  REQUIRE(leases.acquire({0, 1}, 2, [&] { granted = true; }).has_value());
  CHECK(leases.waiting(0) == 1);
  CHECK(leases.waiting(1) == 1);
  std::this_thread::sleep_for(20ms);
  kcoral::LeaseTimes times = leases.finish(2);
  CHECK(times.wait_ms >= 20);
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
  CHECK(finishes_within([&] { (void)leases.acquire(0, 1, [&] { leases.release(1); }); }, 2000ms));
  CHECK_FALSE(leases.holder(0).has_value());
  // Granted by a handoff: the callback queries and acquires the next GPU lease.
  REQUIRE(leases.acquire(0, 2, [] {}).has_value());
  REQUIRE(leases.acquire(0, 3, [&] {
    second_granted = true;
    (void)leases.times(3);
    (void)leases.waiting(0);
    leases.release(3);
  }).has_value());
  CHECK(finishes_within([&] { leases.release(2); }, 2000ms));
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
        leases.release(id);
        completed.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(overlaps.load() == 0);
  CHECK(completed.load() == 400);
  CHECK_FALSE(leases.holder(0).has_value());
}

// Sets of GPUs: a made-up inventory of four.

TEST_CASE("a set is granted whole or not at all") {
  LeaseManager leases(4);
  REQUIRE(leases.acquire(2, 1, [] {}).has_value());
  bool granted = false;
  REQUIRE(leases.acquire({3, 1, 2}, 2, [&] { granted = true; }).has_value());
  // GPUs 1 and 3 are free, but the set waits whole for GPU 2: none of it is held meanwhile.
  CHECK_FALSE(granted);
  CHECK(leases.held(2).empty());
  CHECK_FALSE(leases.holder(1).has_value());
  CHECK_FALSE(leases.holder(3).has_value());
  CHECK(leases.waiting(0) == 0);
  for (std::size_t gpu : {1, 2, 3}) CHECK(leases.waiting(gpu) == 1);
  leases.release(1);
  CHECK(granted);
  CHECK(leases.held(2) == std::vector<std::size_t>{1, 2, 3});
  for (std::size_t gpu : {1, 2, 3}) {
    CHECK(leases.holder(gpu) == std::optional<LeaseManager::HolderId>(2));
    CHECK(leases.waiting(gpu) == 0);
  }
  CHECK_FALSE(leases.holder(0).has_value());
  leases.release(2);
  CHECK(leases.held(2).empty());
  for (std::size_t gpu : {0, 1, 2, 3}) CHECK_FALSE(leases.holder(gpu).has_value());
}

TEST_CASE("holders asking for crossing sets never deadlock and all finish") {
  // Single-threaded first: a waiter holds nothing of its set, so the holder it waits on is
  // not waiting on it.
  {
    LeaseManager leases(4);
    REQUIRE(leases.acquire({0, 1}, 1, [] {}).has_value());
    bool second = false;
    REQUIRE(leases.acquire({1, 0}, 2, [&] { second = true; }).has_value());
    CHECK(leases.held(2).empty());
    leases.release(1);
    CHECK(second);
    CHECK(leases.held(2) == std::vector<std::size_t>{0, 1});
  }
  // Then a ring of sets, each crossing the next ({0,1}, {1,2}, {2,3}, {3,0}), taken and given
  // back over and over on as many threads: one GPU at a time this would deadlock.
  LeaseManager leases(4);
  std::atomic<int> overlaps{0};
  std::atomic<int> completed{0};
  bool finished = finishes_within([&] {
    std::vector<std::thread> threads;
    for (std::size_t first = 0; first < 4; ++first) {
      threads.emplace_back([&, first] {
        std::vector<std::size_t> set = {(first + 1) % 4, first};
        auto id = static_cast<LeaseManager::HolderId>(first + 1);
        for (int round = 0; round < 200; ++round) {
          auto granted = std::make_shared<std::promise<void>>();
          auto ready = granted->get_future();
          if (!leases.acquire(set, id, [granted] { granted->set_value(); })) {
            overlaps.fetch_add(1);
            return;
          }
          ready.wait();
          for (std::size_t gpu : set)
            if (leases.holder(gpu) != std::optional<LeaseManager::HolderId>(id)) overlaps.fetch_add(1);
          leases.release(id);
          completed.fetch_add(1);
        }
      });
    }
    for (auto& thread : threads) thread.join();
  }, 20000ms);
  REQUIRE(finished);
  CHECK(overlaps.load() == 0);
  CHECK(completed.load() == 800);
}

TEST_CASE("a set behind a held GPU is not overtaken on its GPUs, but disjoint requests go ahead") {
  LeaseManager leases(4);
  std::vector<LeaseManager::HolderId> order;
  auto grant_to = [&order](LeaseManager::HolderId id) { return [&order, id] { order.push_back(id); }; };
  REQUIRE(leases.acquire(0, 1, grant_to(1)).has_value());
  REQUIRE(leases.acquire({0, 1}, 2, grant_to(2)).has_value());
  // GPU 1 is free but reserved for the set waiting ahead: later one-GPU requests queue.
  REQUIRE(leases.acquire(1, 3, grant_to(3)).has_value());
  REQUIRE(leases.acquire(1, 4, grant_to(4)).has_value());
  REQUIRE(leases.acquire(0, 5, grant_to(5)).has_value());
  CHECK(order == std::vector<LeaseManager::HolderId>{1});
  CHECK_FALSE(leases.holder(1).has_value());
  CHECK(leases.waiting(0) == 2);
  CHECK(leases.waiting(1) == 3);
  // Nobody ahead wants GPUs 2 and 3: granted at once, in the acquiring call.
  REQUIRE(leases.acquire({2, 3}, 6, grant_to(6)).has_value());
  CHECK(order == std::vector<LeaseManager::HolderId>{1, 6});
  // The set comes first, then both of its GPUs go on in one release, in queue order.
  leases.release(1);
  CHECK(order == std::vector<LeaseManager::HolderId>{1, 6, 2});
  CHECK(leases.held(2) == std::vector<std::size_t>{0, 1});
  leases.release(2);
  CHECK(order == std::vector<LeaseManager::HolderId>{1, 6, 2, 3, 5});
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(5));
  CHECK(leases.holder(1) == std::optional<LeaseManager::HolderId>(3));
  CHECK(leases.waiting(1) == 1);
  leases.release(3);
  CHECK(order == std::vector<LeaseManager::HolderId>{1, 6, 2, 3, 5, 4});
}

TEST_CASE("a waiter's release takes it out of the queue and lets later requests through") {
  LeaseManager leases(4);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  bool set_granted = false, later_granted = false;
  REQUIRE(leases.acquire({0, 1}, 2, [&] { set_granted = true; }).has_value());
  REQUIRE(leases.acquire(1, 3, [&] { later_granted = true; }).has_value());
  CHECK_FALSE(later_granted);
  std::this_thread::sleep_for(20ms);
  leases.release(2);
  // GPU 1 is no longer reserved: the later request has it, within the release.
  CHECK(later_granted);
  CHECK(leases.holder(1) == std::optional<LeaseManager::HolderId>(3));
  CHECK(leases.waiting(0) == 0);
  CHECK(leases.waiting(1) == 0);
  CHECK(leases.times(2).wait_ms >= 20);
  leases.release(1);
  CHECK_FALSE(set_granted);
  CHECK_FALSE(leases.holder(0).has_value());
  // It may ask again, as a newcomer.
  REQUIRE(leases.acquire({0, 1}, 2, [&] { set_granted = true; }).has_value());
  CHECK_FALSE(set_granted);
  leases.release(3);
  CHECK(set_granted);
}

TEST_CASE("finish of a crashed holder, holding a set or waiting, frees everything and grants the next") {
  LeaseManager leases(4);
  std::vector<LeaseManager::HolderId> order;
  auto grant_to = [&order](LeaseManager::HolderId id) { return [&order, id] { order.push_back(id); }; };
  REQUIRE(leases.acquire({0, 1}, 1, grant_to(1)).has_value());
  REQUIRE(leases.acquire({1, 2}, 2, grant_to(2)).has_value());
  REQUIRE(leases.acquire(2, 3, grant_to(3)).has_value());  // behind the set's reservation
  CHECK(order == std::vector<LeaseManager::HolderId>{1});
  std::this_thread::sleep_for(20ms);
  kcoral::LeaseTimes first = leases.finish(1);  // held a set
  CHECK(first.held_ms >= 20);
  CHECK(order == std::vector<LeaseManager::HolderId>{1, 2});
  CHECK_FALSE(leases.holder(0).has_value());
  CHECK(leases.held(2) == std::vector<std::size_t>{1, 2});
  CHECK(leases.finish(2).wait_ms >= 20);
  CHECK(order == std::vector<LeaseManager::HolderId>{1, 2, 3});
  CHECK(leases.held(3) == std::vector<std::size_t>{2});
  CHECK_FALSE(leases.holder(1).has_value());
  // A crashed waiter: its reservation goes with it.
  REQUIRE(leases.acquire({2, 3}, 4, grant_to(4)).has_value());
  REQUIRE(leases.acquire(3, 5, grant_to(5)).has_value());
  CHECK(order == std::vector<LeaseManager::HolderId>{1, 2, 3});
  (void)leases.finish(4);
  CHECK(order == std::vector<LeaseManager::HolderId>{1, 2, 3, 5});
  CHECK(leases.holder(3) == std::optional<LeaseManager::HolderId>(5));
  CHECK(leases.waiting(2) == 0);
  CHECK(leases.waiting(3) == 0);
  // Forgotten: no times are left for the finished.
  CHECK(leases.times(1).held_ms == 0);
  CHECK(leases.times(4).wait_ms == 0);
}

TEST_CASE("an invalid request fails and changes nothing") {
  LeaseManager leases(4);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  REQUIRE(leases.acquire({0, 1}, 2, [] {}).has_value());
  auto never = [] { FAIL("granted an invalid request"); };
  auto check_fails = [&](std::vector<std::size_t> gpus, LeaseManager::HolderId holder) {
    auto status = leases.acquire(std::move(gpus), holder, never);
    REQUIRE_FALSE(status.has_value());
    CHECK(status.error().kind == kcoral::ErrorKind::engine);
    CHECK_FALSE(status.error().message.empty());
  };
  check_fails({}, 3);             // no GPU
  check_fails({4}, 3);            // out of range
  check_fails({2, 7}, 3);         // one of them out of range
  check_fails({2, 3, 2}, 3);      // named twice
  check_fails({3}, 1);            // holds already
  check_fails({2, 3}, 2);         // waits already
  CHECK(leases.holder(0) == std::optional<LeaseManager::HolderId>(1));
  for (std::size_t gpu : {1, 2, 3}) CHECK_FALSE(leases.holder(gpu).has_value());
  CHECK(leases.waiting(0) == 1);
  CHECK(leases.waiting(1) == 1);
  CHECK(leases.waiting(2) == 0);
  CHECK(leases.waiting(3) == 0);
  CHECK(leases.held(1) == std::vector<std::size_t>{0});
  CHECK(leases.held(2).empty());
  // The refused holder was not queued: it gets free GPUs at once.
  bool granted = false;
  REQUIRE(leases.acquire({2, 3}, 3, [&] { granted = true; }).has_value());
  CHECK(granted);
  leases.release(1);
  CHECK(leases.held(2) == std::vector<std::size_t>{0, 1});
}

TEST_CASE("several grants of one release each run outside the lock and may call back in") {
  LeaseManager leases(4);
  REQUIRE(leases.acquire({0, 1, 2, 3}, 1, [] {}).has_value());
  std::optional<LeaseManager::HolderId> seen_on_0;
  std::vector<std::size_t> seen_held;
  bool second = false;
  REQUIRE(leases.acquire({0, 1}, 2, [&] {
    seen_on_0 = leases.holder(0);
    seen_held = leases.held(2);
    leases.release(2);
  }).has_value());
  REQUIRE(leases.acquire({2, 3}, 3, [&] {
    second = true;
    (void)leases.waiting(2);
    (void)leases.times(3);
    // Asks for a set for someone else from inside a grant: granted within this call.
    (void)leases.acquire({0, 1}, 4, [] {});
    leases.release(3);
  }).has_value());
  CHECK(finishes_within([&] { leases.release(1); }, 2000ms));
  CHECK(seen_on_0 == std::optional<LeaseManager::HolderId>(2));
  CHECK(seen_held == std::vector<std::size_t>{0, 1});
  CHECK(second);
  CHECK(leases.held(4) == std::vector<std::size_t>{0, 1});
  CHECK(leases.held(3).empty());
  CHECK_FALSE(leases.holder(2).has_value());
}

TEST_CASE("wait counts from the request to the grant and hold from the grant to the release, once per set") {
  LeaseManager leases(4);
  REQUIRE(leases.acquire(0, 1, [] {}).has_value());
  auto before_ask = LeaseManager::Clock::now();
  REQUIRE(leases.acquire({0, 1, 2}, 2, [] {}).has_value());
  auto asked = LeaseManager::Clock::now();
  std::this_thread::sleep_for(30ms);
  auto before_grant = LeaseManager::Clock::now();
  leases.release(1);
  auto granted = LeaseManager::Clock::now();
  std::this_thread::sleep_for(20ms);
  leases.release(2);
  auto released = LeaseManager::Clock::now();
  auto ms = [](LeaseManager::Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  kcoral::LeaseTimes times = leases.times(2);
  CHECK(times.wait_ms >= ms(before_grant - asked));
  CHECK(times.wait_ms <= ms(granted - before_ask));
  CHECK(times.held_ms >= 20);
  // Not once per GPU of the set.
  CHECK(times.held_ms <= ms(released - before_grant));
}

TEST_CASE("holders of random sets on many threads never share a GPU and are all served") {
  constexpr std::size_t kGpus = 4;
  constexpr int kThreads = 6;
  constexpr int kRounds = 150;
  LeaseManager leases(kGpus);
  std::array<std::atomic<int>, kGpus> users{};
  std::atomic<int> overlaps{0};
  std::atomic<int> failures{0};
  std::atomic<int> completed{0};
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread) {
    threads.emplace_back([&, thread] {
      auto id = static_cast<LeaseManager::HolderId>(thread + 1);
      std::mt19937 random(static_cast<std::mt19937::result_type>(thread));
      std::vector<std::size_t> all = {0, 1, 2, 3};
      for (int round = 0; round < kRounds; ++round) {
        std::shuffle(all.begin(), all.end(), random);
        std::vector<std::size_t> set(all.begin(), all.begin() + 1 + static_cast<long>(random() % 3));
        auto granted = std::make_shared<std::promise<void>>();
        auto ready = granted->get_future();
        if (!leases.acquire(set, id, [granted] { granted->set_value(); })) {
          failures.fetch_add(1);  // assertions stay on the main thread
          return;
        }
        if (ready.wait_for(10s) != std::future_status::ready) {
          failures.fetch_add(1);  // never granted
          (void)leases.finish(id);
          return;
        }
        std::vector<std::size_t> sorted = set;
        std::sort(sorted.begin(), sorted.end());
        if (leases.held(id) != sorted) overlaps.fetch_add(1);
        for (std::size_t gpu : set)
          if (users[gpu].fetch_add(1) != 0) overlaps.fetch_add(1);
        std::this_thread::yield();
        for (std::size_t gpu : set) users[gpu].fetch_sub(1);
        leases.release(id);
        completed.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(overlaps.load() == 0);
  CHECK(failures.load() == 0);
  CHECK(completed.load() == kThreads * kRounds);
  for (std::size_t gpu = 0; gpu < kGpus; ++gpu) {
    CHECK_FALSE(leases.holder(gpu).has_value());
    CHECK(leases.waiting(gpu) == 0);
  }
}

}  // TEST_SUITE
