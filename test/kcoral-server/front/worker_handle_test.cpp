// WorkerHandle (kcoral-server/front/worker_handle.cpp), the front's state machine for one
// worker, running jobs: a well-behaved worker runs its job to a result and its parts, its
// blobs arriving in batches under the descriptor limit; a failed program's error comes
// through; a worker takes another program only as often as the server allows, and its
// retirement reason is passed on when it stops; deadlines and crashes are answered, and a
// result already in the channel when the exit notice comes is still the answer. A frame of
// megabytes is decoded on the long-step threads while the strand goes on; an exit notice
// or a deadline that comes meanwhile waits for it, and a frame that is not a message is
// refused there too. A frame of 128 KiB or more is held in its job's answer budget before
// it is read (answered busy when it cannot be), and from a worker that runs no program
// refused unread. The hostile worker's messages, the GPU lease and context turns, and
// starts have files of their own (worker_handle_*_test.cpp).
#include "kcoral-server/channel/spill_frame.hpp"
#include "held_thread_pool.hpp"
#include "kcoral/sha256.hpp"
#include "worker_handle_support.hpp"
#include "worker_frames.hpp"

using kcoral::WorkerHandle;
using kcoral::test::Harness;
using kcoral::test::make_job;
using kcoral::test::memfd_with;
using kcoral::test::completed;
using kcoral::test::HeldThreadPool;
namespace messages = kcoral::messages;

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

TEST_CASE("a worker let go after its last result is killed, not trusted to exit") {
  // Its program may have sent the result itself, early, and mean to run on.
  Harness h;
  h.take(make_job());
  h.send(completed());
  REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
  CHECK(h.killed());
}

TEST_CASE("a result part that names one of the job's blobs is the front's own copy of it; the others are in its memfd") {
  Harness h;
  auto job = make_job();
  const std::string given = "uploaded bytes";
  job->admitted.blobs.emplace(kcoral::sha256_hex(given), *kcoral::Blob::copy_of(given));
  h.take(job);
  auto parts = memfd_with("abcdefg", true);
  messages::RunResult result = completed({3, given.size(), 4});
  result.part_blobs = {"", kcoral::sha256_hex(given), ""};
  h.send(result, {parts.get()});
  REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
  REQUIRE(h.outcome->result.has_value());
  const auto& received = h.outcome->result->parts;
  REQUIRE(received.size() == 3);
  CHECK(received[0].view() == "abc");
  CHECK(received[1].view() == given);
  CHECK(received[1].fd() == job->admitted.blobs.at(kcoral::sha256_hex(given)).fd());
  CHECK(received[2].view() == "defg");
  SUBCASE("with every part named, no memfd comes") {
    Harness only;
    only.take(job);
    messages::RunResult named = completed({given.size()});
    named.part_blobs = {kcoral::sha256_hex(given)};
    only.send(named);
    REQUIRE(only.pump([&] { return only.outcome.has_value(); }));
    REQUIRE(only.outcome->result.has_value());
    REQUIRE(only.outcome->result->parts.size() == 1);
    CHECK(only.outcome->result->parts[0].view() == given);
  }
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

// -- frames of megabytes ---------------------------------------------------------------------

namespace {

constexpr std::size_t kLargeFrameLimit = std::size_t{8} << 20;

// A completed result whose text is megabytes long (its value followed by blanks).
messages::RunResult large_result() {
  messages::RunResult result = completed();
  result.results.insert(result.results.size() - 1, std::string(std::size_t{2} << 20, ' '));
  return result;
}

}  // namespace

TEST_CASE("a result of megabytes is decoded on the long-step threads, and the strand goes on meanwhile") {
  HeldThreadPool long_steps;
  Harness h(1, kLargeFrameLimit, std::chrono::seconds(60), {0}, &long_steps.threads);
  h.take(make_job());
  h.send(large_result());
  bool other = false;
  boost::asio::post(h.strand, [&] { other = true; });
  REQUIRE(h.pump([&] { return other; }));
  h.run_for(std::chrono::milliseconds(50));
  CHECK_FALSE(h.outcome.has_value());  // its frame waits for the held thread
  long_steps.release();
  REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
  REQUIRE(h.outcome->result.has_value());
  CHECK(h.outcome->result->completed());
  CHECK(h.outcome->result->results_json.size() > (std::size_t{2} << 20));
}

TEST_CASE("an exit notice or a deadline that comes while a result is decoded leaves the result the answer") {
  HeldThreadPool long_steps;
  bool exit_notice = false;
  SUBCASE("the exit notice") { exit_notice = true; }
  SUBCASE("the deadline") {}
  Harness h(1, kLargeFrameLimit, std::chrono::seconds(60), {0}, &long_steps.threads);
  h.take(make_job(exit_notice ? 30 : 0.1));
  h.send(large_result());
  h.run_for(std::chrono::milliseconds(200));  // past the deadline
  if (exit_notice) h.handle->exited("exit code 0");
  CHECK_FALSE(h.outcome.has_value());
  long_steps.release();
  REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
  REQUIRE(h.outcome->result.has_value());
  CHECK(h.outcome->result->completed());
}

TEST_CASE("a deadline that passes while a padded frame of megabytes is decoded waits for its refusal") {
  HeldThreadPool long_steps;
  Harness h(1, kLargeFrameLimit, std::chrono::seconds(60), {0}, &long_steps.threads);
  h.take(make_job(0.1));
  h.send_text(R"({"type":"progress","index":1)" + std::string(std::size_t{2} << 20, ' ') + "}");
  h.run_for(std::chrono::milliseconds(200));
  CHECK_FALSE(h.outcome.has_value());
  long_steps.release();
  CHECK(h.engine_error().find("'progress' message of 2097") != std::string::npos);
  CHECK(h.killed());
}

TEST_CASE("a frame of megabytes that is not a message is refused where it is decoded, and its worker killed") {
  HeldThreadPool long_steps;
  long_steps.release();
  Harness h(1, kLargeFrameLimit, std::chrono::seconds(60), {0}, &long_steps.threads);
  h.take(make_job());
  h.send_text(std::string(std::size_t{2} << 20, '['));
  CHECK(h.engine_error().find("broke the channel protocol") != std::string::npos);
  CHECK(h.killed());
}

namespace {

// A worker that took a job whose answer is held in a budget of its own; its large frames
// wait for the held long-step threads.
struct HeldAnswer {
  HeldThreadPool long_steps;
  kcoral::InflightBytes budget{std::size_t{64} << 20};
  Harness h{1, kLargeFrameLimit, std::chrono::seconds(60), {0}, &long_steps.threads};
  std::shared_ptr<kcoral::ExecuteJob> job = make_job();
  explicit HeldAnswer(std::uint64_t output_limit_bytes = 0) {
    job->admitted.output_limit_bytes = output_limit_bytes;
    job->answer_held.emplace(budget);
    h.take(job);
  }
};

}  // namespace

TEST_CASE("a result of megabytes is held in its job's answer budget from its arrival until the job lets it go") {
  HeldAnswer held(4 << 20);
  auto& [long_steps, budget, h, job] = held;
  messages::RunResult result = large_result();
  const std::size_t values = result.results.size();
  std::size_t output = 0;
  std::size_t escapes = 0;
  SUBCASE("values: held once") { result.stdout_text.clear(); }
  SUBCASE("output: held three times") {
    result.stdout_text = std::string(std::size_t{2} << 20, 'o');
    output = result.stdout_text.size();
  }
  SUBCASE("output of control characters: and what their escapes take, three times, once read") {
    result.stdout_text = std::string(std::size_t{1} << 20, '\x01');
    output = escapes = result.stdout_text.size();
  }
  const std::size_t text = messages::encode(result).size();
  h.send(result);
  REQUIRE(h.pump([&] { return budget.used() > 0; }));
  // Before a byte of it is read: its text, and twice its output more (said in its object).
  CHECK(budget.used() == text + 2 * output);
  CHECK(text >= values + output);
  long_steps.release();
  REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
  CHECK(h.outcome->result->completed());
  CHECK(budget.used() == text + 2 * output + 3 * 5 * escapes);
  job.reset();
  h.run_for(std::chrono::milliseconds(20));  // the cancelled deadline's wait lets its copy go
  CHECK(budget.used() == 0);
}

TEST_CASE("a result of 128 KiB to a megabyte is held from its arrival too, and decoded on the strand") {
  HeldAnswer held(4 << 20);
  auto& [long_steps, budget, h, job] = held;
  messages::RunResult result = completed();
  result.stdout_text = std::string(kcoral::kHeldAnswerBytes, '\x01');  // 6 bytes each as JSON
  const std::size_t text = messages::encode(result).size();
  REQUIRE(text < kcoral::kLongStepBytes);
  h.send(result);
  REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));  // the long-step threads stay held
  CHECK(h.outcome->result->completed());
  CHECK(budget.used() == text + 2 * kcoral::kHeldAnswerBytes + 3 * 5 * kcoral::kHeldAnswerBytes);
}

TEST_CASE("a result of megabytes that the in-flight budget cannot hold now is answered busy, unread") {
  kcoral::InflightBytes budget(std::size_t{4} << 20);
  kcoral::InflightBytes::Reservation others(budget);
  REQUIRE(others.grow_to(std::size_t{3} << 20));
  Harness h(1, kLargeFrameLimit);
  auto job = make_job();
  job->answer_held.emplace(budget);
  h.take(job);
  h.send(large_result());
  REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
  REQUIRE_FALSE(h.outcome->result.has_value());
  CHECK(h.outcome->result.error().kind == kcoral::ErrorKind::busy);
  CHECK(h.outcome->result.error().message.find("--max-inflight-bytes") != std::string::npos);
  CHECK(job->answer_refused);  // counted in /metrics as a guard event
  CHECK(h.killed());
  job.reset();
  h.run_for(std::chrono::milliseconds(20));
  CHECK(budget.used() == std::size_t{3} << 20);
}

TEST_CASE("a result whose frame grows, or whose object grows, after it came is refused where it is read") {
  HeldThreadPool long_steps;
  Harness h(1, kLargeFrameLimit, std::chrono::seconds(60), {0}, &long_steps.threads);
  h.take(make_job());
  std::string text = messages::encode(large_result());
  kcoral::UniqueFd file = memfd_with(text, /*sealed=*/false);
  kcoral::test::send_spill_frame(h.worker.fd(), file.get());
  h.run_for(std::chrono::milliseconds(50));  // taken, and held before it is read
  std::string expected;
  SUBCASE("the frame grows") {
    REQUIRE(::pwrite(file.get(), "  ", 2, static_cast<off_t>(text.size())) == 2);
    expected = "changed size after it came";
  }
  SUBCASE("its object grows past what was held for it") {
    const std::size_t newline = text.find('\n');
    text[newline] = ' ';
    text[text.size() - 2] = '\n';  // within the values' padding
    REQUIRE(::pwrite(file.get(), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()));
    expected = "object grew after it came";
  }
  long_steps.release();
  CHECK(h.engine_error().find(expected) != std::string::npos);
  CHECK(h.killed());
}

TEST_CASE("a result whose output is longer than its object said when it came is refused where it is read") {
  HeldThreadPool long_steps;
  Harness h(1, kLargeFrameLimit, std::chrono::seconds(60), {0}, &long_steps.threads);
  h.take(make_job());
  std::string text = messages::encode(large_result());
  const std::string said = R"("stdout_bytes":7)";  // "printed"
  REQUIRE(text.find(said) != std::string::npos);
  text.replace(text.find(said), said.size(), R"("stdout_bytes":0)");  // then, once held, as it was
  kcoral::UniqueFd file = memfd_with(text, /*sealed=*/false);
  kcoral::test::send_spill_frame(h.worker.fd(), file.get());
  h.run_for(std::chrono::milliseconds(50));
  text.replace(text.find(R"("stdout_bytes":0)"), said.size(), said);
  REQUIRE(::pwrite(file.get(), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()));
  long_steps.release();
  CHECK(h.engine_error().find("output longer than its frame said") != std::string::npos);
}

TEST_CASE("an answer that could never be held is too large, not busy") {
  kcoral::InflightBytes budget(std::size_t{3} << 20);
  Harness h(1, kLargeFrameLimit);
  auto job = make_job();
  job->answer_held.emplace(budget);
  h.take(job);
  messages::RunResult result = large_result();
  result.stdout_text = std::string(std::size_t{1} << 20, 'o');  // 3 MiB and 2 MiB more to hold
  h.send(result);
  REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
  REQUIRE_FALSE(h.outcome->result.has_value());
  CHECK(h.outcome->result.error().kind == kcoral::ErrorKind::response_too_large);
  CHECK(h.killed());
}

TEST_CASE("a result whose object is not within its first 256 KiB is held at four times more") {
  HeldAnswer held;
  auto& [long_steps, budget, h, job] = held;
  messages::RunResult result = completed();
  result.retired = std::string(std::size_t{2} << 20, 'r');  // a text of megabytes in the object
  h.send(result);
  REQUIRE(h.pump([&] { return budget.used() > 0; }));
  CHECK(budget.used() >= 5 * (std::size_t{2} << 20));
  long_steps.release();
  REQUIRE(h.pump([&] { return h.outcome.has_value() && h.gone; }));
}

TEST_CASE("a frame of megabytes from a worker that runs no program kills it unread") {
  // A reused worker between programs, whose `ready` the front would take: padded to 2 MiB,
  // it is never read.
  Harness h(2, kLargeFrameLimit);
  h.take(make_job());
  messages::RunResult result = completed();
  result.continues = true;
  h.send(result);
  REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
  REQUIRE(h.handle->state() == WorkerHandle::State::recycling);
  h.send_text(R"({"type":"ready")" + std::string(std::size_t{2} << 20, ' ') + "}");
  REQUIRE(h.pump([&] { return h.gone; }));
  CHECK(h.idle == 1);
  CHECK(h.killed());
}

// -- the start ------------------------------------------------------------------------------

}  // TEST_SUITE
