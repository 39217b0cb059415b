// WorkerHandle's GPU protocol: the program lease asked, granted and given back (the deadline
// waits while it is asked for); a worker of several GPUs gets its context turn at once and
// leases all of its GPUs together; a gpu_access notes whose program held a GPU (only a
// program of the same tenant's); context
// turns asked while starting, and ready while holding one kills the worker.
#include "worker_handle_support.hpp"

using kcoral::WorkerHandle;
using kcoral::test::Harness;
using kcoral::test::make_job;
using kcoral::test::completed;
namespace messages = kcoral::messages;

namespace {

// Ends the job with a cpu_only call's gpu_access failure: the request it names as disturbed.
std::optional<std::string> interfered_request(Harness& h) {
  messages::RunResult result = completed();
  result.error = messages::ErrorDetail{kcoral::ErrorKind::gpu_access, "used the GPU", 2, "run", "", std::nullopt, "cuMemAlloc", "f.py:1"};
  h.send(result);
  REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
  REQUIRE(h.outcome->result.has_value());
  REQUIRE(h.outcome->result->error->gpu_access.has_value());
  return h.outcome->result->error->gpu_access->interfered_request_id;
}

}  // namespace

TEST_SUITE("worker_handle") {

TEST_CASE("the GPU lease: asked, granted, given back; the deadline waits while it is asked for") {
  Harness h;
  h.take(make_job());
  h.send(messages::Lease{true});
  CHECK(std::holds_alternative<messages::LeaseGranted>(h.receive().message));
  CHECK(h.leases.program_holder({0}, 0) == h.process);
  h.send(messages::Lease{false});
  h.send(completed());
  REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
  CHECK(h.outcome->result.has_value());
  CHECK(h.outcome->timings.lease_held_ms >= 0);
}

TEST_CASE("a worker of several GPUs: its context turn comes at once, its lease is all of them, held together") {
  Harness h(1, 1 << 20, std::chrono::seconds(60), {0, 1});
  // Whether the front has sent the worker something by now (receive() would wait for it).
  auto sent = [&] {
    for (int i = 0; i < 20; ++i) h.io.run_for(std::chrono::milliseconds(5));
    pollfd readable{h.worker.fd(), POLLIN, 0};
    return ::poll(&readable, 1, 0) == 1;
  };
  bool other_turn = false;
  h.leases.acquire_init({0}, 1, [&] { other_turn = true; });  // GPU 0's one turn is another worker's
  REQUIRE(other_turn);
  h.send(messages::InitLease{true});
  REQUIRE(sent());
  CHECK(std::holds_alternative<messages::LeaseGranted>(h.receive().message));
  h.send(messages::InitLease{false});
  REQUIRE(h.leases.acquire_program({1}, 2, [] {}).has_value());  // another program holds GPU 1
  h.take(make_job());
  h.send(messages::GpuAccess{});  // a cpu_only call, while that program holds one of its GPUs
  h.send(messages::Lease{true});
  CHECK_FALSE(sent());                                  // no grant while GPU 1 is held
  CHECK(!h.leases.program_holder({0}, 0).has_value());  // and no part of its set meanwhile
  h.leases.release_program(2);
  REQUIRE(sent());
  CHECK(std::holds_alternative<messages::LeaseGranted>(h.receive().message));
  CHECK(h.leases.program_holder({0}, 0) == h.process);
  CHECK(h.leases.program_holder({1}, 0) == h.process);
  h.send(messages::Lease{false});
  CHECK(interfered_request(h) == "other-request");
  CHECK(!h.leases.program_holder({0, 1}, 0).has_value());
}

TEST_CASE("a gpu_access notes whose program held the GPU, when it is the same tenant's") {
  Harness h;
  bool same_tenant = true;
  SUBCASE("the same tenant's") {}
  SUBCASE("another tenant's: never named") {
    same_tenant = false;
    h.holder->tenant = 1;
  }
  REQUIRE(h.leases.acquire_program({0}, 1, [] {}).has_value());  // another worker holds it
  h.take(make_job());
  h.send(messages::GpuAccess{});
  if (same_tenant) CHECK(interfered_request(h) == "other-request");
  else CHECK(interfered_request(h) == std::nullopt);
}

TEST_CASE("context turns: asked while starting, granted, given back before ready") {
  Harness h;
  h.send(messages::InitLease{true});
  CHECK(std::holds_alternative<messages::LeaseGranted>(h.receive().message));
  h.send(messages::InitLease{false});
  h.send(messages::Ready{});
  REQUIRE(h.pump([&] { return h.idle == 1; }));
  CHECK(!h.gone);
}

TEST_CASE("ready while holding a context turn kills the worker") {
  Harness h;
  h.send(messages::InitLease{true});
  CHECK(std::holds_alternative<messages::LeaseGranted>(h.receive().message));
  h.send(messages::Ready{});
  REQUIRE(h.pump([&] { return h.gone; }));
  CHECK(h.idle == 0);
  CHECK(h.killed());
}

}  // TEST_SUITE
