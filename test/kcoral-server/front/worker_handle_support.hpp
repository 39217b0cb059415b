// What the WorkerHandle tests share: a job of four instructions, sealed and unsealed
// memfds for result parts, a completed result, and the Harness, in which the test plays a
// worker over a real channel with a real process standing in for the worker's process
// tree (so that a kill can be seen).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "kcoral/program_builder.hpp"
#include "worker_handle.hpp"

namespace kcoral::test {

// A job of four instructions (upload, get_function, run, return).
inline std::shared_ptr<kcoral::ExecuteJob> make_job(double timeout_seconds = 30, std::uint64_t max_returned_bytes = 1 << 20) {
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
  job->admitted.max_returned_bytes = max_returned_bytes;
  REQUIRE(job->seal_program_text().has_value());
  return job;
}

inline kcoral::UniqueFd memfd_with(std::string_view data, bool sealed) {
  kcoral::UniqueFd fd(::memfd_create("handle-test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(::write(fd.get(), data.data(), data.size()) == static_cast<ssize_t>(data.size()));
  if (sealed) ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
  return fd;
}

// A completed result; each part named by one returned value, as a worker's are.
inline messages::RunResult completed(std::vector<std::uint64_t> part_sizes = {}) {
  std::string results = R"({"out":{"type":"int","value":"1"})";
  for (std::size_t i = 0; i < part_sizes.size(); ++i)
    results += R"(,"b)" + std::to_string(i) + R"(":{"type":"bytes","part":"return:)" + std::to_string(i) + "\"}";
  return {false, results + "}", "printed", false, "", false, 1.5, std::move(part_sizes), std::nullopt, ""};
}

inline std::shared_ptr<kcoral::ExecuteJob> other_job() {
  auto job = std::make_shared<kcoral::ExecuteJob>();
  job->request_id = "other-request";
  return job;
}

struct Harness {
  boost::asio::io_context io;
  WorkerHandle::Strand strand{boost::asio::make_strand(io)};
  kcoral::LeaseBroker leases{2, 1};  // GPU 0, and GPU 1 for a worker of both
  kcoral::Channel worker;  // the test is the worker at this end
  pid_t process = -1;      // stands in for the worker's process tree
  std::shared_ptr<WorkerHandle> handle;
  // The job of whichever other worker holds a GPU (the Events' job_of), tenant 0's.
  std::shared_ptr<kcoral::ExecuteJob> holder = other_job();
  int idle = 0;
  bool gone = false;
  std::optional<kcoral::JobOutcome> outcome;
  int alive = 0;
  int started = 0;
  std::vector<std::pair<std::string, bool>> start_failures;  // why, timed out

  explicit Harness(std::size_t programs = 1, std::size_t max_message_bytes = 1 << 20,
                   std::chrono::steady_clock::duration start_timeout = std::chrono::seconds(60),
                   std::vector<std::size_t> gpus = {0}, boost::asio::thread_pool* long_steps = nullptr) {
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
                                [this](pid_t) { return std::shared_ptr<const kcoral::ExecuteJob>(holder); },
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
                                            WorkerHandle::Limits{max_message_bytes, programs, start_timeout},
                                            long_steps);
    handle->start();
  }
  ~Harness() {
    if (process <= 0) return;  // never kill(-1, ...)
    ::kill(process, SIGKILL);
    ::waitpid(process, nullptr, 0);
  }

  // Runs the io until `done()` (2 s at most); whether done.
  template <class Predicate>
  bool pump(Predicate done) {
    for (int i = 0; i < 400 && !done(); ++i) run_for(std::chrono::milliseconds(5));
    return done();
  }
  // Runs the io for `time`, even with nothing of its own to wait for: a handler posted from
  // another thread may come meanwhile.
  void run_for(std::chrono::milliseconds time) {
    auto waiting = boost::asio::make_work_guard(io);
    io.restart();
    io.run_for(time);
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

}  // namespace kcoral::test
