// WorkerHandle (kcoral-server/front/worker_handle.cpp), the front's state machine for one
// worker, against a hostile worker played by the test over a real channel, with a real
// process standing in for the worker's process tree (so that a kill can be seen). A
// well-behaved worker runs its job to a result; every message a worker may not send in
// its state, every malformed one, and every bad result part kills the process and fails
// that job with `engine` (and only that job); leases and context turns follow the
// protocol; deadlines and crashes are answered. A start is reported once however it ends:
// alive and started at ready (alive earlier on a GPU worker, at its context-turn request),
// or failed with the reason (its own `failed`, its exit, its start deadline, which waits
// while the worker waits for a context-making turn). A worker of several GPUs gets its
// context turn at once and leases all of its GPUs together.
#include <doctest/doctest.h>

#include <cstdint>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>

#include "kcoral/program_builder.hpp"
#include "worker_handle.hpp"

using kcoral::WorkerHandle;
namespace messages = kcoral::messages;

namespace {

// A job of four instructions (upload, get_function, run, return).
std::shared_ptr<kcoral::ExecuteJob> make_job(double timeout_seconds = 30, std::uint64_t max_binary_bytes = 1 << 20) {
  kcoral::ProgramBuilder builder;
  auto module = builder.upload_module("m", "def f():\n    return 1\n");
  auto f = builder.get_function("f", module, "f");
  builder.return_value("out", builder.run("out", f));
  auto built = builder.build();
  REQUIRE(built.has_value());
  auto job = std::make_shared<kcoral::ExecuteJob>();
  job->request_id = "request-1";
  job->admitted.program_json = "{}";
  job->admitted.program = std::move(built->program);
  job->admitted.blobs = std::move(built->blobs);
  job->admitted.timeout_seconds = timeout_seconds;
  job->admitted.max_binary_bytes = max_binary_bytes;
  return job;
}

kcoral::UniqueFd memfd_with(std::string_view data, bool sealed) {
  kcoral::UniqueFd fd(::memfd_create("handle-test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(::write(fd.get(), data.data(), data.size()) == static_cast<ssize_t>(data.size()));
  if (sealed) ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
  return fd;
}

// A completed result; each part named by one returned value, as a worker's are.
messages::RunResult completed(std::vector<std::uint64_t> part_sizes = {}) {
  std::string results = R"({"out":{"type":"int","value":"1"})";
  for (std::size_t i = 0; i < part_sizes.size(); ++i)
    results += R"(,"b)" + std::to_string(i) + R"(":{"type":"bytes","part":"return:)" + std::to_string(i) + "\"}";
  return {false, results + "}", "printed", false, "", false, 1.5, std::move(part_sizes), std::nullopt, ""};
}

struct Harness {
  boost::asio::io_context io;
  WorkerHandle::Strand strand{boost::asio::make_strand(io)};
  kcoral::LeaseBroker leases{2, 1};  // GPU 0, and GPU 1 for a worker of both
  kcoral::Channel worker;  // the test is the worker at this end
  pid_t process = -1;      // stands in for the worker's process tree
  std::shared_ptr<WorkerHandle> handle;
  int idle = 0;
  bool gone = false;
  std::optional<kcoral::JobOutcome> outcome;
  int alive = 0;
  int started = 0;
  std::vector<std::pair<std::string, bool>> start_failures;  // why, timed out

  explicit Harness(std::size_t programs = 1, std::size_t max_message_bytes = 1 << 20,
                   std::chrono::steady_clock::duration start_timeout = std::chrono::seconds(60),
                   std::vector<std::size_t> gpus = {0}) {
    process = ::fork();
    if (process == 0) {
      ::setsid();
      while (true) ::pause();
    }
    auto pair = kcoral::Channel::socket_pair();
    REQUIRE(pair.has_value());
    worker = kcoral::Channel(std::move(pair->second));
    WorkerHandle::Events events{[this](const kcoral::WorkerPtr&) { ++idle; },
                                [this](const kcoral::WorkerPtr&, std::shared_ptr<kcoral::ExecuteJob>,
                                       kcoral::JobOutcome result) { outcome = std::move(result); },
                                [this](const kcoral::WorkerPtr&) { gone = true; },
                                [](pid_t) { return std::optional<std::string>("other-request"); },
                                [this](const kcoral::WorkerPtr&) { ++alive; },
                                [this](const kcoral::WorkerPtr&) {
                                  CHECK(idle == 0);  // before its first idle
                                  ++started;
                                },
                                [this](const kcoral::WorkerPtr&, const std::string& why, bool timed_out) {
                                  CHECK(!gone);  // before it is gone
                                  start_failures.emplace_back(why, timed_out);
                                }};
    auto held = kcoral::Process::open(process);
    REQUIRE(held.has_value());
    handle = std::make_shared<WorkerHandle>(strand, std::move(*held), 0, std::move(gpus), std::move(pair->first),
                                            leases, events,
                                            WorkerHandle::Limits{max_message_bytes, programs, start_timeout});
    handle->start();
  }
  ~Harness() {
    if (process <= 0) return;  // never kill(-1, ...)
    ::kill(process, SIGKILL);
    ::waitpid(process, nullptr, 0);
  }

  template <class Predicate>
  bool pump(Predicate done) {
    for (int i = 0; i < 400 && !done(); ++i) io.run_for(std::chrono::milliseconds(5));
    return done();
  }
  void send(const messages::Message& message, std::vector<int> fds = {}) {
    REQUIRE(messages::send(worker, message, fds).has_value());
  }
  void send_text(const std::string& text) { REQUIRE(worker.send(text).has_value()); }
  // The next message the front sent this worker.
  messages::Received receive() {
    pollfd readable{worker.fd(), POLLIN, 0};
    for (int i = 0; i < 400 && ::poll(&readable, 1, 0) == 0; ++i) io.run_for(std::chrono::milliseconds(5));
    auto received = messages::receive(worker);
    REQUIRE_MESSAGE(received.has_value(), received.error().message);
    return std::move(**received);
  }
  // Announces itself and takes a job (its blobs and its run arrive).
  void take(std::shared_ptr<kcoral::ExecuteJob> job) {
    send(messages::Ready{});
    REQUIRE(pump([&] { return idle == 1; }));
    REQUIRE(handle->run(std::move(job)));
    while (!std::holds_alternative<messages::RunProgram>(receive().message)) {
    }
  }
  bool killed() {
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (::waitpid(process, &status, WNOHANG) == process) {
        process = -1;
        return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      }
      ::usleep(5000);
    }
    return false;
  }
  std::string engine_error() {
    REQUIRE(pump([&] { return outcome.has_value() && gone; }));
    REQUIRE(!outcome->result.has_value());
    CHECK(outcome->result.error().kind == kcoral::ErrorKind::engine);
    return outcome->result.error().message;
  }
};

}  // namespace

TEST_SUITE("worker_handle") {

TEST_CASE("a worker that says ready runs a job to its result and parts, and is then let go") {
  Harness h;
  h.take(make_job());
  h.send(messages::Progress{0});
  h.send(messages::Progress{2});
  auto parts = memfd_with("abcdefg", true);
  h.send(completed({3, 4}), {parts.get()});
  REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
  REQUIRE(h.outcome->result.has_value());
  const kcoral::ProgramResult& result = *h.outcome->result;
  CHECK(result.completed());
  CHECK(result.stdout_output.text == "printed");
  REQUIRE(result.parts.size() == 2);
  CHECK(result.parts[0].view() == "abc");
  CHECK(result.parts[1].view() == "defg");
  CHECK(h.handle->state() == WorkerHandle::State::gone);
  CHECK(!messages::receive(h.worker).has_value());  // its channel was closed
}

TEST_CASE("a job's blobs arrive in batches under the descriptor limit, then its run") {
  Harness h;
  auto job = make_job();
  for (int i = 0; i < 600; ++i) {
    std::string data = "blob " + std::to_string(i);
    job->admitted.blobs.emplace(std::to_string(i), *kcoral::Blob::copy_of(data));
  }
  h.send(messages::Ready{});
  REQUIRE(h.pump([&] { return h.idle == 1; }));
  REQUIRE(h.handle->run(job));
  std::size_t blobs = 0, batches = 0;
  while (true) {
    messages::Received received = h.receive();
    if (std::holds_alternative<messages::RunProgram>(received.message)) break;
    const auto& batch = std::get<messages::Blobs>(received.message);
    CHECK(received.fds.size() < kcoral::Channel::kMaxFds);
    for (std::size_t i = 0; i < batch.digests.size(); ++i) {
      auto blob = kcoral::Blob::from_fd(std::move(received.fds[i]));
      CHECK(blob->view() == job->admitted.blobs.at(batch.digests[i]).view());
    }
    blobs += batch.digests.size();
    ++batches;
  }
  CHECK(blobs == job->admitted.blobs.size());
  CHECK(batches >= 3);
}

TEST_CASE("a failed program's error comes through with its instruction") {
  Harness h;
  h.take(make_job());
  messages::RunResult failed = completed();
  failed.error = messages::ErrorDetail{kcoral::ErrorKind::runtime, "boom", 2, "run", "Traceback", "out", std::nullopt, std::nullopt};
  h.send(failed);
  REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
  REQUIRE(h.outcome->result.has_value());
  REQUIRE(h.outcome->result->error.has_value());
  CHECK(h.outcome->result->error->kind == kcoral::ErrorKind::runtime);
  CHECK(h.outcome->result->error->instruction_index == 2);
  CHECK(h.outcome->result->error->instruction_id == "out");
}

TEST_CASE("ready while a job runs kills the worker and fails that job") {
  Harness h;
  h.take(make_job());
  h.send(messages::Ready{});
  CHECK(h.engine_error() ==
        "the worker running this program broke the channel protocol ('ready' while not starting) and was killed");
  CHECK(h.killed());
  CHECK(h.idle == 1);  // not idle again: nothing of it reaches another job
}

TEST_CASE("messages a running worker may not send kill it") {
  struct Case {
    const char* name;
    std::string text;
    const char* why;
  };
  for (const Case& c : std::vector<Case>{
           {"progress past the end", R"({"type":"progress","index":4})", "progress past the program's end"},
           {"a missing field", R"({"type":"progress"})", "'index' is missing"},
           {"a default-looking field", R"({"type":"progress","index":"0"})", "non-negative integer"},
           {"an unknown type", R"({"type":"take_over"})", "unknown channel message type"},
           {"a front message", R"({"type":"lease_granted"})", "a worker does not send 'lease_granted'"},
           {"a front message without its memfd", R"({"type":"run","request_id":"x","output_limit_bytes":1,"max_binary_bytes":1})",
            "a 'run' message came with 0 descriptors instead of 1"},
           {"a zygote message", R"({"type":"exited","pid":1})", "a worker does not send 'exited'"},
           {"a lease given back unheld", R"({"type":"lease","acquire":false})", "does not hold"},
           {"a context turn mid-job", R"({"type":"init_lease","acquire":true})", "'init_lease' after starting"},
           {"failed mid-job", R"({"type":"failed","message":"x"})", "'failed' after starting"},
           {"not JSON", "{{{{", "not a JSON object"},
       }) {
    CAPTURE(c.name);
    Harness h;
    h.take(make_job());
    h.send_text(c.text);
    CHECK(h.engine_error().find(c.why) != std::string::npos);
    CHECK(h.killed());
  }
}

TEST_CASE("progress that goes back, and a lease asked for twice, kill the worker") {
  {
    Harness h;
    h.take(make_job());
    h.send(messages::Progress{2});
    h.send(messages::Progress{1});
    CHECK(h.engine_error().find("progress that goes back") != std::string::npos);
  }
  {
    Harness h;
    h.take(make_job());
    h.send(messages::Lease{true});
    CHECK(std::holds_alternative<messages::LeaseGranted>(h.receive().message));
    h.send(messages::Lease{true});
    CHECK(h.engine_error().find("asked twice for the GPU lease") != std::string::npos);
    CHECK(!h.leases.program_holder({0}, 0).has_value());  // taken back from the killed worker
  }
}

TEST_CASE("returned values pass as JSON whatever the size of their numbers") {
  const std::string big = "1" + std::string(400, '0');
  for (std::string results : {R"({"a":{"type":"integer","value":)" + big + "}}",
                              std::string(R"({"a":[1e400,-1e-400,-0.0,0,-7,5E+3,"\u0000",true,false,null,{}]})")}) {
    CAPTURE(results.substr(0, 60));
    Harness h;
    h.take(make_job());
    messages::RunResult result = completed();
    result.results = results;
    h.send(result);
    REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
    REQUIRE(h.outcome->result.has_value());
    CHECK(h.outcome->result->results_json == results);
  }
}

TEST_CASE("results that are not what they claim kill the worker") {
  SUBCASE("an error kind a worker may not report") {
    Harness h;
    h.take(make_job());
    messages::RunResult result = completed();
    result.error = messages::ErrorDetail{kcoral::ErrorKind::busy, "x", 0, "run", "", std::nullopt, std::nullopt, std::nullopt};
    h.send(result);
    CHECK(h.engine_error().find("error kind 'busy'") != std::string::npos);
  }
  SUBCASE("parts in a memfd that is not sealed") {
    Harness h;
    h.take(make_job());
    auto parts = memfd_with("abc", false);
    h.send(completed({3}), {parts.get()});
    CHECK(h.engine_error().find("not sealed") != std::string::npos);
  }
  SUBCASE("parts in a pipe") {
    Harness h;
    h.take(make_job());
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    h.send(completed({3}), {pipe_fds[0]});
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    CHECK(h.engine_error().find("not a regular file") != std::string::npos);
  }
  SUBCASE("parts of another size than declared") {
    Harness h;
    h.take(make_job());
    auto parts = memfd_with("abcdef", true);
    h.send(completed({3, 2}), {parts.get()});
    CHECK(h.engine_error().find("not the size declared") != std::string::npos);
  }
  SUBCASE("a 64 GiB memfd is refused by its size, before it is mapped") {
    Harness h;
    h.take(make_job());
    kcoral::UniqueFd huge(::memfd_create("huge", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    REQUIRE(::ftruncate(huge.get(), std::int64_t{64} << 30) == 0);  // sparse: costs nothing
    ::fcntl(huge.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
    h.send(completed({std::uint64_t{64} << 30}), {huge.get()});
    CHECK(h.engine_error().find("exceed the job's binary limit") != std::string::npos);
  }
  SUBCASE("returned values that are not one JSON object, or that add fields to the response") {
    for (std::string results : {std::string("{"), std::string("[]"), std::string(R"({},"status":"COMPLETED","x":0)"),
                                std::string(R"({"a":1})") + std::string(100000, ']'), std::string(R"({"a":1} {})"),
                                std::string(R"({"a":tru})"), std::string(R"({"a":1.})"), std::string(R"({"a":01})"),
                                std::string(R"({"a":[1,]})"), std::string(R"({"a" 1})"),
                                // Found by returned_values_fuzzer: a bad escape in a top-level
                                // key, and a vertical tab (not JSON whitespace) after a number.
                                std::string(R"({"on\s":0})"), std::string("{\"a\":4\v}")}) {
      CAPTURE(results.substr(0, 40));
      Harness h;
      h.take(make_job());
      messages::RunResult result = completed();
      result.results = results;
      h.send(result);
      CHECK(h.engine_error().find("returned values are not") != std::string::npos);
    }
  }
  SUBCASE("returned values that name parts wrongly: missing, twice, out of range, unnamed") {
    for (std::string results : {std::string(R"({"a":{"type":"bytes","part":"return:1"}})"),
                                std::string(R"({"a":{"type":"bytes","part":"return:0"},"b":{"part":"return:0"}})"),
                                std::string(R"({"a":{"type":"bytes","part":"return:+0"}})"),
                                std::string(R"({"a":{"type":"bytes","part":"other:0"}})"), std::string("{}")}) {
      CAPTURE(results);
      Harness h;
      h.take(make_job());
      auto parts = memfd_with("abc", true);
      messages::RunResult result = completed({3});
      result.results = results;
      h.send(result, {parts.get()});
      CHECK(h.engine_error().find("part") != std::string::npos);
      CHECK(h.engine_error().find("not valid JSON") == std::string::npos);
    }
  }
  SUBCASE("returned values nested a million deep fail the program (serialization), and the worker goes") {
    for (std::string value : {std::string(1000000, '[') + std::string(1000000, ']'),
                              [] {  // the typed tree's own shape, as a patched encoder would send it
                                std::string deep;
                                for (int i = 0; i < 200000; ++i) deep += R"({"type":"array","value":[)";
                                for (int i = 0; i < 200000; ++i) deep += "]}";
                                return deep;
                              }()}) {
      Harness h(1, std::size_t{64} << 20);
      h.take(make_job());
      messages::RunResult result = completed();
      result.continues = true;  // a worker that would take another program: not after this
      result.results = R"({"out":)" + value + "}";
      h.send(result);
      REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
      REQUIRE(h.outcome->result.has_value());
      const auto& error = h.outcome->result->error;
      REQUIRE(error.has_value());
      CHECK(error->kind == kcoral::ErrorKind::serialization);
      CHECK(error->instruction_index == 3);
      CHECK(error->instruction_op == "return");
      CHECK(error->message.find("return 'out': returned values nested deeper than 256 levels") != std::string::npos);
      CHECK(h.outcome->result->results_json == "{}");
      CHECK(h.outcome->result->stdout_output.text == "printed");
      CHECK(h.killed());
    }
  }
  SUBCASE("declared sizes over the limit that overflow when added") {
    Harness h;
    h.take(make_job());
    auto parts = memfd_with("ab", true);
    h.send(completed({1, ~std::uint64_t{0}}), {parts.get()});
    CHECK(h.engine_error().find("exceed the job's binary limit") != std::string::npos);
  }
}

TEST_CASE("a worker that floods the front with messages is killed") {
  Harness h;
  h.take(make_job());
  for (int i = 0; i < 100; ++i) h.send(messages::GpuAccess{});
  CHECK(h.engine_error().find("more messages than its program explains") != std::string::npos);
}

TEST_CASE("any message from an idle worker kills it; it never had a job to fail") {
  Harness h;
  h.send(messages::Ready{});
  REQUIRE(h.pump([&] { return h.idle == 1; }));
  h.send(messages::Progress{0});
  REQUIRE(h.pump([&] { return h.gone; }));
  CHECK(!h.outcome.has_value());
  CHECK(h.killed());
}

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
  messages::RunResult result = completed();
  result.error = messages::ErrorDetail{kcoral::ErrorKind::gpu_access, "used the GPU", 2, "run", "", std::nullopt, "cuMemAlloc", "f.py:1"};
  h.send(result);
  REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
  REQUIRE(h.outcome->result.has_value());
  REQUIRE(h.outcome->result->error->gpu_access.has_value());
  CHECK(h.outcome->result->error->gpu_access->interfered_request_id == "other-request");
  CHECK(!h.leases.program_holder({0, 1}, 0).has_value());
}

TEST_CASE("a gpu_access notes whose program held the GPU") {
  Harness h;
  REQUIRE(h.leases.acquire_program({0}, 1, [] {}).has_value());  // another worker holds it
  h.take(make_job());
  h.send(messages::GpuAccess{});
  messages::RunResult result = completed();
  result.error = messages::ErrorDetail{kcoral::ErrorKind::gpu_access, "used the GPU", 2, "run", "", std::nullopt, "cuMemAlloc", "f.py:1"};
  h.send(result);
  REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
  REQUIRE(h.outcome->result.has_value());
  REQUIRE(h.outcome->result->error->gpu_access.has_value());
  CHECK(h.outcome->result->error->gpu_access->interfered_request_id == "other-request");
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

TEST_CASE("a worker may take another program only as many times as the server allows") {
  SUBCASE("programs = 1: let go after its result, whatever it says") {
    Harness h(1);
    h.take(make_job());
    messages::RunResult result = completed();
    result.continues = true;
    h.send(result);
    REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
  }
  SUBCASE("programs = 2: ready again after the first, let go after the second") {
    Harness h(2);
    h.take(make_job());
    messages::RunResult result = completed();
    result.continues = true;
    h.send(result);
    REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
    CHECK(!h.gone);
    CHECK(h.handle->state() == WorkerHandle::State::recycling);
    h.send(messages::Ready{});
    REQUIRE(h.pump([&] { return h.idle == 2; }));
    REQUIRE(h.handle->run(make_job()));
    h.send(result);
    REQUIRE(h.pump([&] { return h.gone; }));
  }
}

TEST_CASE("a reused worker's retirement reason is passed on only when it stops, as the worker wrote it") {
  // The reason is the worker's own text: an attacker's. The front passes it on; the event
  // log cuts it and the metrics count it by a fixed set of labels (router, metrics tests).
  SUBCASE("it continues: a reason it also sends is dropped") {
    Harness h(2);
    h.take(make_job());
    messages::RunResult result = completed();
    result.continues = true;
    result.retired = "threads: but it continues";
    h.send(result);
    REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
    CHECK(h.outcome->worker_retired.empty());
    CHECK(!h.gone);
  }
  SUBCASE("it stops: a large reason with control bytes reaches the outcome, and the worker is let go") {
    Harness h(2);
    h.take(make_job());
    messages::RunResult result = completed();
    result.retired = std::string(100 << 10, '\x1b') + std::string("\n\0threads: x", 12);  // within the frame limit, escaped
    h.send(result);
    REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
    CHECK(h.outcome->result.has_value());
    CHECK(h.outcome->worker_retired == result.retired);
  }
}

TEST_CASE("a job past its deadline is answered timeout and its process killed") {
  Harness h;
  h.take(make_job(0.05));
  REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
  REQUIRE(!h.outcome->result.has_value());
  CHECK(h.outcome->result.error().kind == kcoral::ErrorKind::timeout);
  CHECK(h.killed());
}

TEST_CASE("a worker that dies mid-instruction fails that instruction, saying how it died") {
  Harness h;
  h.take(make_job());
  h.send(messages::Progress{2});
  h.handle->exited("killed by signal 11");
  REQUIRE(h.outcome.has_value());
  REQUIRE(h.outcome->result.has_value());
  const auto& error = *h.outcome->result->error;
  CHECK(error.kind == kcoral::ErrorKind::runtime);
  CHECK(error.instruction_index == 2);
  CHECK(error.traceback == "The worker process ended: killed by signal 11.\n");
  CHECK(h.gone);
}

TEST_CASE("a result already in the channel when the exit notice comes is still the answer") {
  Harness h;
  h.take(make_job());
  h.send(completed());
  h.handle->exited("exit code 0");
  REQUIRE(h.outcome.has_value());
  CHECK(h.outcome->result.has_value());
  CHECK(h.outcome->result->completed());
}

// -- the start ------------------------------------------------------------------------------

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
