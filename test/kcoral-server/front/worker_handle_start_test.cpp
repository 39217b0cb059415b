// WorkerHandle's starts: a start is reported once however it ends: alive and started at
// ready (alive earlier on a GPU worker, at its context-turn request), or failed with the
// reason (its own `failed`, its exit, its start deadline, which waits while the worker
// waits for a context-making turn, a protocol break); a discarded worker reports nothing.
#include "worker_handle_support.hpp"

using kcoral::WorkerHandle;
using kcoral::test::Harness;
using kcoral::test::make_job;
using kcoral::test::completed;
namespace messages = kcoral::messages;

TEST_SUITE("worker_handle") {

TEST_CASE("a start is reported once: alive and started at ready, not again when the worker is recycled") {
  Harness h(2);
  h.take(make_job());
  CHECK(h.alive == 1);
  CHECK(h.started == 1);
  messages::RunResult result = completed();
  result.continues = true;
  h.send(result);
  REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
  h.send(messages::Ready{});
  REQUIRE(h.pump([&] { return h.idle == 2; }));
  CHECK(h.alive == 1);
  CHECK(h.started == 1);
  CHECK(h.start_failures.empty());
}

TEST_CASE("a GPU worker is alive when it asks for its context-making turn, started only at ready") {
  Harness h;
  h.send(messages::InitLease{true});
  CHECK(std::holds_alternative<messages::LeaseGranted>(h.receive().message));
  CHECK(h.alive == 1);
  CHECK(h.started == 0);
  h.send(messages::InitLease{false});
  h.send(messages::Ready{});
  REQUIRE(h.pump([&] { return h.idle == 1; }));
  CHECK(h.alive == 1);
  CHECK(h.started == 1);
}

TEST_CASE("a worker not ready by its start deadline is killed and its start reported timed out") {
  Harness h(1, 1 << 20, std::chrono::milliseconds(50));
  REQUIRE(h.pump([&] { return h.gone; }));
  REQUIRE(h.start_failures.size() == 1);
  CHECK(h.start_failures[0].first == "a worker did not become ready within 0.05 s of its start, and was killed");
  CHECK(h.start_failures[0].second);
  CHECK(h.killed());
  CHECK(h.started == 0);
}

TEST_CASE("a worker ready within its start deadline is not killed when the deadline would have passed") {
  Harness h(1, 1 << 20, std::chrono::milliseconds(50));
  h.send(messages::Ready{});
  REQUIRE(h.pump([&] { return h.idle == 1; }));
  for (int i = 0; i < 30; ++i) h.io.run_for(std::chrono::milliseconds(5));
  CHECK(!h.gone);
  CHECK(h.start_failures.empty());
}

TEST_CASE("the start deadline waits while the worker waits for a context-making turn, and runs on after") {
  Harness h(1, 1 << 20, std::chrono::milliseconds(100));
  bool other_granted = false;
  h.leases.acquire_init({0}, 1, [&] { other_granted = true; });  // another worker makes its context
  REQUIRE(other_granted);
  h.send(messages::InitLease{true});
  for (int i = 0; i < 60; ++i) h.io.run_for(std::chrono::milliseconds(5));  // 300 ms, past the deadline
  CHECK(!h.gone);
  CHECK(h.start_failures.empty());
  h.leases.release_init({0}, 1);  // its turn: the deadline's rest runs
  CHECK(std::holds_alternative<messages::LeaseGranted>(h.receive().message));
  REQUIRE(h.pump([&] { return h.gone; }));
  REQUIRE(h.start_failures.size() == 1);
  CHECK(h.start_failures[0].second);
  CHECK(h.killed());
}

TEST_CASE("a worker that says why it cannot start reports that reason, and goes") {
  Harness h;
  h.send(messages::Failed{"--memory-limit-bytes is 64 MiB, but a worker already holds 147 MiB"});
  REQUIRE(h.pump([&] { return h.gone; }));
  REQUIRE(h.start_failures.size() == 1);
  CHECK(h.start_failures[0].first == "--memory-limit-bytes is 64 MiB, but a worker already holds 147 MiB");
  CHECK(!h.start_failures[0].second);
  CHECK(h.alive == 0);
}

TEST_CASE("a worker that exits before ready: the exit notice says how; its own last words come first") {
  SUBCASE("the exit notice alone") {
    Harness h;
    h.handle->exited("exit code 1");
    REQUIRE(h.start_failures.size() == 1);
    CHECK(h.start_failures[0].first == "a worker exited before it became ready (exit code 1)");
    CHECK(h.gone);
  }
  SUBCASE("out of memory") {
    Harness h;
    h.handle->exited("killed by signal 9", std::string("the program ran out of memory"));
    REQUIRE(h.start_failures.size() == 1);
    CHECK(h.start_failures[0].first ==
          "a worker exited before it became ready (killed by signal 9): the program ran out of memory");
  }
  SUBCASE("its failed message, still in the channel when the notice overtakes it") {
    Harness h;
    h.send(messages::Failed{"cannot make the sandbox's namespaces"});
    h.handle->exited("exit code 1");
    REQUIRE(h.start_failures.size() == 1);
    CHECK(h.start_failures[0].first == "cannot make the sandbox's namespaces");
  }
  SUBCASE("its channel closes and no notice comes") {
    Harness h;
    h.worker = kcoral::Channel();
    REQUIRE(h.pump([&] { return h.gone; }));
    REQUIRE(h.start_failures.size() == 1);
    CHECK(h.start_failures[0].first == "a worker exited before it became ready");
  }
  SUBCASE("its channel closes, then the notice comes within the grace") {
    Harness h;
    h.worker = kcoral::Channel();
    for (int i = 0; i < 10; ++i) h.io.run_for(std::chrono::milliseconds(5));
    CHECK(h.start_failures.empty());
    h.handle->exited("killed by signal 11");
    REQUIRE(h.start_failures.size() == 1);
    CHECK(h.start_failures[0].first == "a worker exited before it became ready (killed by signal 11)");
  }
}

TEST_CASE("a starting worker that breaks the protocol fails its start; a discarded one reports nothing") {
  {
    Harness h;
    h.send(messages::Progress{0});
    REQUIRE(h.pump([&] { return h.gone; }));
    REQUIRE(h.start_failures.size() == 1);
    CHECK(h.start_failures[0].first == "a starting worker broke the channel protocol ('progress' without a job)");
    CHECK(h.killed());
  }
  {
    Harness h;
    h.handle->discard();
    CHECK(h.gone);
    CHECK(h.start_failures.empty());
  }
}

}  // TEST_SUITE
