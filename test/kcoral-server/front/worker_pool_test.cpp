// WorkerPool (kcoral-server/front/worker_pool.cpp). Without workers, so that every job
// waits: a tenant past its cap of waiting programs has the next one refused busy at once,
// saying what to do, while another tenant's are queued; the per-tenant load is reported;
// a drain answers every waiting job; a program of several GPUs leaves the queue to await
// a worker of its set group, counted in the load by its GPUs, and a cancel or a drain
// answers it there. With workers, played by the stand-in worker parent
// (fake_worker_parent.hpp) for four made-up GPUs "gpu-a" to "gpu-d": a program of n GPUs
// runs in a worker that sees the block of n GPUs least busy, and is answered with their
// --gpus indices; programs of one GPU go on while that worker starts; a failed start of it
// answers the program `engine` with the reason, and the server is not failing for it; a
// set group's worker runs one program even where workers are reused. With one-queue
// workers (--cuda-connections auto), a program whose worker says a benchmark() call ran on
// several streams runs again, once, on a worker of CUDA's default queues (a hostile
// worker that always says so gets no third run), and a failed start of that worker
// answers it `engine`; with a number of connections nothing runs again.
#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "fake_worker_parent.hpp"
#include "front_test_support.hpp"
#include "kcoral/program_builder.hpp"
#include "worker_pool.hpp"

using namespace std::chrono_literals;

namespace {

// A job of two instructions (upload, return), asking for `gpu_count` GPUs if given.
std::shared_ptr<kcoral::ExecuteJob> make_job(const std::string& request_id, std::size_t tenant,
                                             std::optional<std::uint32_t> gpu_count) {
  kcoral::ProgramBuilder builder;
  builder.return_value("out", builder.upload_bytes("b", "data"));
  builder.set_options({std::nullopt, std::nullopt, gpu_count});
  auto built = builder.build();
  REQUIRE(built.has_value());
  auto job = std::make_shared<kcoral::ExecuteJob>();
  job->request_id = request_id;
  job->tenant = tenant;
  job->admitted.program_json = built->program.to_json();
  job->admitted.program = std::move(built->program);
  job->admitted.blobs = std::move(built->blobs);
  job->admitted.timeout_seconds = 30;
  job->admitted.max_returned_bytes = 1 << 20;
  REQUIRE(job->seal_program_text().has_value());
  return job;
}

// A pool over four made-up GPUs whose programs may hold all four: groups 0-3 are the
// per-GPU ones, 4 and 5 the pairs {0,1} and {2,3}, 6 the three {0,1,2}, 7 all four.
kcoral::WorkerPool::Config four_gpus() {
  kcoral::WorkerPool::Config config;
  config.groups = {"gpu-a", "gpu-b", "gpu-c", "gpu-d"};
  config.gpu_ids = {0, 1, 2, 3};
  config.max_gpus_per_program = 4;
  config.tenants = 2;
  return config;
}

// A pool run by the stand-in worker parent, its workers running each program they get;
// `environment` adds to the parent's (FAKE_SET_START_S, FAKE_SET_FAIL).
struct Harness {
  boost::asio::io_context io;
  std::filesystem::path directory;
  std::unique_ptr<kcoral::WorkerPool> pool;
  std::map<std::string, kcoral::JobOutcome> answered;  // by request id
  std::vector<std::string> order;                      // request ids, as answered
  std::vector<std::size_t> failed_starts;              // each failed start's group
  std::vector<bool> failing_changes;

  explicit Harness(std::vector<std::string> environment = {}, std::size_t programs_per_worker = 1,
                   std::optional<int> cuda_connections = 0) {
    char made[] = "/tmp/kcoral-pool-test-XXXXXX";
    REQUIRE(::mkdtemp(made) != nullptr);
    directory = made;
    std::filesystem::path script = directory / "fake-parent";
    std::ofstream(script) << kcoral::test::kFakeWorkerParent;
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
    kcoral::WorkerPool::Config config = four_gpus();
    config.programs_per_worker = programs_per_worker;
    config.cuda_connections = cuda_connections;
    config.zygote.python = script.string();
    config.zygote.worker.work_root = (directory / "work").string();
    environment.push_back("FAKE_LOG=" + (directory / "log").string());
    environment.push_back("FAKE_RUN=1");
    config.zygote.worker.program_environment = std::move(environment);
    config.start_failed = [this](const kcoral::WorkerSupply::StartEnd& end, std::size_t) {
      failed_starts.push_back(end.group);
    };
    config.failing_changed = [this](bool failing, const std::string&) { failing_changes.push_back(failing); };
    pool = std::make_unique<kcoral::WorkerPool>(io, std::move(config));
    REQUIRE(pool->start().has_value());
    REQUIRE(pump([&] { return pool->ready(); }));
  }
  ~Harness() {
    pool.reset();
    std::filesystem::remove_all(directory);
  }

  template <class Predicate>
  bool pump(Predicate done, std::chrono::milliseconds within = 10s) {
    return kcoral::test::pump_until(io, done, within);
  }

  std::shared_ptr<kcoral::ExecuteJob> submit(const std::string& id, std::optional<std::uint32_t> gpu_count = {},
                                             std::size_t tenant = 0) {
    auto job = make_job(id, tenant, gpu_count);
    job->done = [this](std::shared_ptr<kcoral::ExecuteJob> done, kcoral::JobOutcome outcome) {
      order.push_back(done->request_id);
      answered.emplace(done->request_id, std::move(outcome));
    };
    pool->submit(job);
    return job;
  }
  bool has(const std::string& id) const { return answered.count(id) == 1; }

  // The CUDA_VISIBLE_DEVICES the program's worker had, as it returned it.
  std::string devices_of(const std::string& id) const {
    const kcoral::JobOutcome& outcome = answered.at(id);
    REQUIRE_MESSAGE(outcome.result.has_value(), outcome.result.error().message);
    REQUIRE(outcome.result->completed());
    return nlohmann::json::parse(outcome.result->results_json)["devices"]["value"].get<std::string>();
  }
  std::string error_of(const std::string& id, kcoral::ErrorKind kind) const {
    const kcoral::JobOutcome& outcome = answered.at(id);
    REQUIRE_FALSE(outcome.result.has_value());
    CHECK(outcome.result.error().kind == kind);
    return outcome.result.error().message;
  }

  // The CUDA_DEVICE_MAX_CONNECTIONS the program's worker had, as it returned it (0: CUDA's default).
  std::string connections_of(const std::string& id) const {
    return nlohmann::json::parse(answered.at(id).result->results_json)["connections"]["value"].get<std::string>();
  }
  std::size_t forks() const {
    std::size_t count = 0;
    for (const auto& line : log()) count += line[0] == "fork";
    return count;
  }

  // The parent's log, as lines of words.
  std::vector<std::vector<std::string>> log() const { return kcoral::test::log_words(directory / "log"); }
};

}  // namespace

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

TEST_CASE("a program of several GPUs awaits a worker out of the queue, counted by its GPUs; cancel and drain answer it") {
  boost::asio::io_context io;
  kcoral::WorkerPool pool(io, four_gpus());  // never started: no worker ever comes
  std::map<std::string, kcoral::JobOutcome> answered;
  auto submit = [&](const std::string& id, std::size_t tenant, std::optional<std::uint32_t> gpus) {
    auto job = make_job(id, tenant, gpus);
    job->done = [&answered](std::shared_ptr<kcoral::ExecuteJob> done, kcoral::JobOutcome outcome) {
      answered.emplace(done->request_id, std::move(outcome));
    };
    pool.submit(job);
    return job;
  };
  auto pair = submit("pair", 1, 2);
  io.poll();
  // Out of the queue at its turn, though no worker is idle: running for its tenant.
  CHECK(pool.load().waiting == 0);
  CHECK(pool.load().running == 1);
  CHECK(pool.load().gpus_running == 2);
  CHECK(pool.tenant_load()[1].running == 1);
  submit("single", 0, std::nullopt);
  submit("quad", 0, 4);  // behind its tenant's program of one GPU, which no worker takes
  io.poll();
  kcoral::WorkerPool::Load load = pool.load();
  CHECK(load.capacity == 4);
  CHECK(load.running == 1);
  CHECK(load.waiting == 2);
  CHECK(load.gpus_running == 2);
  CHECK(load.gpus_waiting == 5);

  pool.cancel(pair, {kcoral::ErrorKind::busy, "the client went away"});
  io.poll();
  REQUIRE(answered.count("pair") == 1);
  REQUIRE_FALSE(answered.at("pair").result.has_value());
  CHECK(answered.at("pair").result.error().message == "the client went away");
  CHECK(pool.load().running == 0);
  CHECK(pool.load().gpus_running == 0);
  CHECK(pool.tenant_load()[1].running == 0);

  submit("pair-2", 1, 2);  // queued: tenant 0, served less lately, is next, and waits for a worker
  io.poll();
  CHECK(pool.load().gpus_running == 0);
  CHECK(pool.load().gpus_waiting == 7);
  bool drained = false;
  pool.drain([&] { drained = true; });
  io.poll();
  CHECK(drained);
  REQUIRE(answered.size() == 4);
  for (const char* id : {"pair-2", "single", "quad"}) {
    CAPTURE(id);
    REQUIRE_FALSE(answered.at(id).result.has_value());
    CHECK(answered.at(id).result.error().kind == kcoral::ErrorKind::busy);
    CHECK(answered.at(id).result.error().message == "the server is shutting down");
  }
  load = pool.load();
  CHECK(load.running + load.waiting + load.gpus_running + load.gpus_waiting == 0);
}

TEST_CASE("a program of more GPUs than any set group holds is answered, not kept waiting") {
  boost::asio::io_context io;
  kcoral::WorkerPool pool(io, {});  // one group, no set groups
  std::optional<kcoral::JobOutcome> outcome;
  auto job = make_job("pair", 0, 2);
  job->done = [&](std::shared_ptr<kcoral::ExecuteJob>, kcoral::JobOutcome o) { outcome = std::move(o); };
  pool.submit(job);
  io.poll();
  REQUIRE(outcome.has_value());
  REQUIRE_FALSE(outcome->result.has_value());
  CHECK(outcome->result.error().kind == kcoral::ErrorKind::engine);
  CHECK(outcome->result.error().message == "this server has no workers that hold 2 GPUs at once");
  CHECK(pool.load().running == 0);
}

TEST_CASE("a program of n GPUs runs in a worker that sees n GPUs, and is answered with their indices") {
  Harness h;
  h.submit("pair", 2);  // first: every block is idle, so the lowest
  h.submit("three", 3);
  h.submit("four", 4);
  h.submit("single");
  REQUIRE(h.pump([&] { return h.answered.size() == 4; }));
  std::string single = h.devices_of("single");
  CHECK(single.size() == 5);  // one of gpu-a to gpu-d
  CHECK(h.answered.at("single").gpu_ids == std::vector<int>{single.back() - 'a'});
  CHECK(h.devices_of("pair") == "gpu-a,gpu-b");
  CHECK(h.answered.at("pair").gpu_ids == std::vector<int>{0, 1});
  CHECK(h.devices_of("three") == "gpu-a,gpu-b,gpu-c");
  CHECK(h.answered.at("three").gpu_ids == std::vector<int>{0, 1, 2});
  CHECK(h.devices_of("four") == "gpu-a,gpu-b,gpu-c,gpu-d");
  CHECK(h.answered.at("four").gpu_ids == std::vector<int>{0, 1, 2, 3});
  // Each held its GPUs' lease (the worker asked for it and got it, or it would not have
  // answered); the start trial never waited for a set group's worker: none was forked
  // before its program.
  CHECK(h.failed_starts.empty());
}

TEST_CASE("programs of one GPU are not held up while a set worker starts; the next pair goes to the idler block") {
  Harness h({"FAKE_SET_START_S=3"});
  h.submit("pair-1", 2);
  h.submit("pair-2", 2);
  h.io.poll();
  CHECK(h.pool->load().running == 2);
  CHECK(h.pool->load().gpus_running == 4);
  for (int i = 0; i < 6; ++i) h.submit("single-" + std::to_string(i));
  REQUIRE(h.pump([&] { return h.answered.size() == 6; }));
  for (int i = 0; i < 6; ++i) CHECK(h.has("single-" + std::to_string(i)));
  CHECK_FALSE(h.has("pair-1"));  // still starting its worker
  REQUIRE(h.pump([&] { return h.answered.size() == 8; }));
  CHECK(h.devices_of("pair-1") == "gpu-a,gpu-b");
  // {0,1} had a program on the way when pair-2 came: it went to {2,3}.
  CHECK(h.devices_of("pair-2") == "gpu-c,gpu-d");
  CHECK(h.answered.at("pair-2").gpu_ids == std::vector<int>{2, 3});
}

TEST_CASE("a set worker that fails to start answers its program engine with why; the server is not failing") {
  Harness h({"FAKE_SET_FAIL=1"});
  for (int i = 0; i < 4; ++i) {  // more than the three failures in a row that make a server failing
    std::string id = "pair-" + std::to_string(i);
    h.submit(id, 2);
    REQUIRE(h.pump([&] { return h.has(id); }));
    std::string message = h.error_of(id, kcoral::ErrorKind::engine);
    CHECK(message == "the worker for this program's 2 GPUs (--gpus 0,1) failed to start: no devices for gpu-a,gpu-b");
  }
  CHECK(h.failed_starts == std::vector<std::size_t>{4, 4, 4, 4});  // the pair {0,1}'s group
  CHECK(h.failing_changes.empty());
  CHECK_FALSE(h.pool->start_counts().failing);
  CHECK(h.pool->start_counts().failed == 4);
  h.submit("single");
  REQUIRE(h.pump([&] { return h.has("single"); }));
  CHECK(h.devices_of("single").size() == 5);
  CHECK(h.pool->load().running == 0);
}

TEST_CASE("cancel and drain answer programs awaiting a set worker's start") {
  Harness h({"FAKE_SET_START_S=30"});
  auto pair = h.submit("pair", 2);
  h.submit("four", 4);
  h.io.poll();
  CHECK(h.pool->load().running == 2);
  h.pool->cancel(pair, {kcoral::ErrorKind::busy, "the client went away"});
  REQUIRE(h.pump([&] { return h.has("pair"); }));
  CHECK(h.error_of("pair", kcoral::ErrorKind::busy) == "the client went away");
  CHECK(h.pool->load().running == 1);
  CHECK(h.pool->load().gpus_running == 4);
  bool drained = false;
  h.pool->drain([&] { drained = true; });
  REQUIRE(h.pump([&] { return drained; }, 5s));  // not waiting for the worker's 30 s start
  CHECK(h.error_of("four", kcoral::ErrorKind::busy) == "the server is shutting down");
}

TEST_CASE("a set worker runs one program and is let go, also where workers are reused") {
  Harness h({}, /*programs_per_worker=*/2);
  h.submit("pair", 2);
  REQUIRE(h.pump([&] { return h.has("pair"); }));
  CHECK(h.devices_of("pair") == "gpu-a,gpu-b");
  h.submit("single");
  REQUIRE(h.pump([&] { return h.has("single"); }));
  std::string set_pid;
  auto exits = [&] {
    std::vector<std::string> pids;
    for (const auto& line : h.log()) {
      if (line[0] == "fork" && line.size() > 2 && line[2] == "gpu-a,gpu-b") set_pid = line[1];
      if (line[0] == "exit") pids.push_back(line[1]);
    }
    return pids;
  };
  REQUIRE(h.pump([&] { return !exits().empty(); }));
  for (int i = 0; i < 40; ++i) h.io.run_for(5ms);
  // Only the set worker exited; the one that ran a program of one GPU takes another.
  CHECK(exits() == std::vector<std::string>{set_pid});
  h.submit("single-2");
  REQUIRE(h.pump([&] { return h.has("single-2"); }));
}

TEST_CASE("one-queue workers: a program whose benchmark() refused a multi-stream call runs again, once, on CUDA's "
          "queues") {
  // Every one-queue worker says its program had such a call; the rerun worker, of CUDA's
  // default queues, runs it as asked.
  Harness h({"FAKE_MULTI_STREAM=1"}, 1, std::nullopt);
  h.submit("multi");
  REQUIRE(h.pump([&] { return h.has("multi"); }));
  CHECK(h.devices_of("multi").size() == 5);  // one GPU: that of the first run's group
  CHECK(h.connections_of("multi") == "0");
  CHECK(h.answered.at("multi").multi_stream == false);
  CHECK(h.pool->load().running == 0);
  // The tenant's count of running programs came back: another is served at once.
  h.submit("next", {}, 0);
  REQUIRE(h.pump([&] { return h.has("next"); }));
  CHECK(h.connections_of("next") == "0");
}

TEST_CASE("one-queue workers: a hostile worker that always says so gets its program run twice, never more") {
  Harness h({"FAKE_ALWAYS_MULTI_STREAM=1"}, 1, std::nullopt);
  std::size_t before = h.forks();
  h.submit("liar");
  REQUIRE(h.pump([&] { return h.has("liar"); }));
  // The second worker said it too: its answer is the program's, multi_stream and all.
  CHECK(h.answered.at("liar").multi_stream);
  CHECK(h.connections_of("liar") == "0");
  // Two forks since: the rerun worker, and the replacement of the one-queue worker that
  // ran it first; a third run would have forked another rerun worker.
  REQUIRE(h.pump([&] { return h.forks() - before >= 2; }));
  for (int i = 0; i < 40; ++i) h.io.run_for(5ms);
  CHECK(h.forks() - before == 2);
  CHECK(h.pool->load().running == 0);
}

TEST_CASE("with a number of CUDA connections, a worker that says its program had a multi-stream call is answered as it is") {
  Harness h({"FAKE_ALWAYS_MULTI_STREAM=1"}, 1, 1);
  h.submit("fixed");
  REQUIRE(h.pump([&] { return h.has("fixed"); }));
  CHECK(h.connections_of("fixed") == "1");
  CHECK(h.answered.at("fixed").multi_stream);
}

TEST_CASE("one-queue workers: a rerun worker that fails to start answers the program engine, saying why") {
  Harness h({"FAKE_MULTI_STREAM=1", "FAKE_RERUN_FAIL=1"}, 1, std::nullopt);
  h.submit("multi");
  REQUIRE(h.pump([&] { return h.has("multi"); }));
  // Its GPU is the first run's, whichever idle worker took it.
  CHECK(h.error_of("multi", kcoral::ErrorKind::engine).starts_with(
      "the worker of CUDA's default queues that was to run this program again (a benchmark() call of it ran on "
      "several streams) failed to start: no devices for gpu-"));
  CHECK_FALSE(h.pool->start_counts().failing);
  CHECK(h.pool->load().running == 0);
}

}  // TEST_SUITE
