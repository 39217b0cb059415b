// WorkerStarts (kcoral-server/front/worker_starts.cpp), the record of worker starts, fed
// outcomes by the test: the start trial passes once every group's first worker is alive
// and fails with the reason of a group's first failed start; the back-off doubles from
// 0.1 s to at most 10 s and a ready start ends it; the server is failing only while every
// group's last three starts failed, with the latest reason, until a group's next ready.
// Groups forked on demand (sets of GPUs) count in none of that, and do not back off.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "worker_starts.hpp"

using kcoral::WorkerStarts;
using namespace std::chrono_literals;

TEST_SUITE("worker_starts") {

TEST_CASE("the start trial passes once the first worker of every group is alive") {
  WorkerStarts starts(2);
  CHECK(!starts.trial_passed());
  starts.alive(0);
  CHECK(!starts.trial_passed());
  starts.ready(1);  // ready is alive too
  CHECK(starts.trial_passed());
  CHECK(!starts.trial_failure());
  starts.failed(0, "later", false);  // after the trial: not its failure
  CHECK(starts.trial_passed());
  CHECK(!starts.trial_failure());
}

TEST_CASE("the start trial fails with the reason of a group's first failed start") {
  WorkerStarts starts(2);
  starts.alive(0);
  starts.failed(1, "--memory-limit-bytes is 64 MiB", false);
  starts.failed(1, "another", false);
  CHECK(!starts.trial_passed());
  REQUIRE(starts.trial_failure());
  CHECK(*starts.trial_failure() == "--memory-limit-bytes is 64 MiB");
  starts.alive(1);  // the first outcome stays
  CHECK(!starts.trial_passed());
}

TEST_CASE("after a failed start the group backs off, doubling from 0.1 s to at most 10 s; ready ends it") {
  WorkerStarts starts(1);
  CHECK(!starts.backing_off(0));
  auto now = WorkerStarts::Clock::now();
  CHECK(starts.next_fork_at(0) <= now);
  starts.failed(0, "x", false, now);
  CHECK(starts.backing_off(0));
  CHECK(starts.next_fork_at(0) == now + 100ms);
  starts.failed(0, "x", false, now);
  CHECK(starts.next_fork_at(0) == now + 200ms);
  starts.failed(0, "x", true, now);
  CHECK(starts.next_fork_at(0) == now + 400ms);
  for (int i = 0; i < 20; ++i) starts.failed(0, "x", false, now);
  CHECK(starts.next_fork_at(0) == now + 10s);
  starts.ready(0);
  CHECK(!starts.backing_off(0));
  CHECK(starts.failures_in_row(0) == 0);
}

TEST_CASE("failing: every group's last three starts failed; the latest reason is said; a ready ends it") {
  WorkerStarts starts(1);
  starts.ready(0);
  starts.failed(0, "first", false);
  starts.failed(0, "second", false);
  CHECK(!starts.failing());
  starts.failed(0, "a worker exited before it became ready (killed by signal 9)", false);
  CHECK(starts.failing());
  CHECK(starts.failing_message() ==
        "no worker can start on this server: its last 3 worker starts failed, the latest with: a worker exited "
        "before it became ready (killed by signal 9)");
  starts.failed(0, "fourth", true);
  CHECK(starts.failing_message().find("its last 4 worker starts failed, the latest with: fourth") !=
        std::string::npos);
  starts.ready(0);
  CHECK(!starts.failing());
  starts.failed(0, "again", false);  // counted from the ready on
  CHECK(!starts.failing());
}

TEST_CASE("one group that still starts workers keeps the server from failing") {
  WorkerStarts starts(2);
  for (int i = 0; i < 5; ++i) starts.failed(0, "GPU 0 is broken", false);
  starts.failed(1, "once", false);
  starts.ready(1);
  CHECK(!starts.failing());
  for (int i = 0; i < 3; ++i) starts.failed(1, "GPU 1 too", false);
  CHECK(starts.failing());
  CHECK(starts.failing_message().find("its last 3 worker starts failed, the latest with: GPU 1 too") !=
        std::string::npos);
}

TEST_CASE("counts by outcome, failing included") {
  WorkerStarts starts(1, {2, 100ms, 10s});
  starts.ready(0);
  starts.failed(0, "x", false);
  starts.failed(0, "y", true);
  WorkerStarts::Counts counts = starts.counts();
  CHECK(counts.ready == 1);
  CHECK(counts.failed == 1);
  CHECK(counts.timed_out == 1);
  CHECK(counts.failing);  // two in a row, as these settings ask
}

TEST_CASE("on-demand groups are outside the trial and failing, and never back off; their starts are counted") {
  WorkerStarts starts({false, true}, WorkerStarts::Settings{});
  CHECK(!starts.trial_passed());
  starts.failed(1, "no devices for the set", false);  // first, before any prepared outcome
  CHECK(!starts.trial_failure());
  starts.alive(0);
  CHECK(starts.trial_passed());  // without any worker of group 1
  for (int i = 0; i < 5; ++i) starts.failed(1, "no devices for the set", i == 4);
  CHECK(!starts.failing());
  CHECK(!starts.backing_off(1));
  CHECK(starts.failures_in_row(1) == 6);
  for (int i = 0; i < 3; ++i) starts.failed(0, "GPU 0 is broken", false);
  CHECK(starts.failing());  // its prepared group alone decides
  starts.failed(1, "no devices for the set", false);
  CHECK(starts.failing_message().find("its last 3 worker starts failed, the latest with: GPU 0 is broken") !=
        std::string::npos);
  CHECK(starts.backing_off(0));
  WorkerStarts::Counts counts = starts.counts();
  CHECK(counts.failed == 9);
  CHECK(counts.timed_out == 1);
  // A set group that never forked a worker keeps no server from failing either.
  WorkerStarts unused_set({false, true}, WorkerStarts::Settings{});
  for (int i = 0; i < 3; ++i) unused_set.failed(0, "GPU 0 is broken", false);
  CHECK(unused_set.failing());
}

}  // TEST_SUITE
