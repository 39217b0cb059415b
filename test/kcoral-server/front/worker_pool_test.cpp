// WorkerPool (kcoral-server/front/worker_pool.cpp) without workers, so that every job
// waits: a tenant past its cap of waiting programs has the next one refused busy at once,
// saying what to do, while another tenant's are queued; the per-tenant load is reported;
// a drain answers every waiting job.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <map>
#include <memory>
#include <string>

#include "worker_pool.hpp"

TEST_SUITE("worker_pool") {

TEST_CASE("a tenant with its most programs waiting has the next refused busy; another tenant's wait") {
  boost::asio::io_context io;
  kcoral::WorkerPool::Config config;
  config.tenants = 2;
  config.max_queued_per_tenant = 2;
  int refused = 0;
  config.tenant_queue_full = [&] { ++refused; };
  kcoral::WorkerPool pool(io, config);  // never started: no worker, so every job waits
  std::map<std::string, std::string> answered;  // request id: its error's message
  auto submit = [&](std::size_t tenant, const std::string& id) {
    auto job = std::make_shared<kcoral::ExecuteJob>();
    job->request_id = id;
    job->tenant = tenant;
    job->done = [&answered](std::shared_ptr<kcoral::ExecuteJob> done, kcoral::JobOutcome outcome) {
      REQUIRE_FALSE(outcome.result.has_value());
      CHECK(outcome.result.error().kind == kcoral::ErrorKind::busy);
      answered[done->request_id] = outcome.result.error().message;
    };
    pool.submit(std::move(job));
  };
  for (const char* id : {"alice-1", "alice-2", "alice-3"}) submit(0, id);
  submit(1, "bob-1");
  io.poll();
  REQUIRE(answered.size() == 1);
  CHECK(answered.count("alice-3") == 1);
  CHECK(answered["alice-3"].find("you have 2 programs waiting") != std::string::npos);
  CHECK(answered["alice-3"].find("--max-queued-per-tenant") != std::string::npos);
  CHECK(refused == 1);
  CHECK(pool.load().waiting == 3);
  auto by_tenant = pool.tenant_load();
  REQUIRE(by_tenant.size() == 2);
  CHECK(by_tenant[0].waiting == 2);
  CHECK(by_tenant[1].waiting == 1);
  CHECK(by_tenant[1].running == 0);

  bool drained = false;
  pool.drain([&] { drained = true; });
  io.poll();
  CHECK(drained);
  CHECK(answered.size() == 4);
  CHECK(answered["bob-1"].find("shutting down") != std::string::npos);
  CHECK(pool.load().waiting == 0);
}

}  // TEST_SUITE
