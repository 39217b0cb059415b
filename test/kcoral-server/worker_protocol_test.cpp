// The front <-> worker messages (kcoral-server/worker_protocol.cpp): send_run sends the
// blobs in descriptor batches and then the run; send_result -> decode_result round-trips
// a program result (outputs, timing, error with its fields, parts, even past one
// message's descriptor budget); malformed results fail with engine; message_type.
#include <doctest/doctest.h>

#include <fcntl.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "kcoral/sha256.hpp"
#include "worker_protocol.hpp"

using kcoral::Channel;
using Json = nlohmann::json;

namespace {

struct Pair {
  Channel front;
  Channel worker;
};

Pair connected() {
  auto fds = Channel::socket_pair();
  REQUIRE(fds.has_value());
  ::fcntl(fds->second.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(fds->first.get(), F_SETFL, O_NONBLOCK);
  return {Channel(std::move(fds->first)), Channel(std::move(fds->second))};
}

// Every message waiting on `channel`.
std::vector<kcoral::Message> drain(const Channel& channel) {
  std::vector<kcoral::Message> messages;
  while (true) {
    auto message = channel.receive();
    REQUIRE(message.has_value());
    if (!*message) return messages;
    messages.push_back(std::move(**message));
  }
}

// What the pool does with a worker's messages: "parts" descriptors first, then the result.
kcoral::Result<kcoral::ProgramResult> receive_result(const Channel& channel) {
  std::vector<kcoral::UniqueFd> parts;
  for (kcoral::Message& message : drain(channel)) {
    const std::string type = kcoral::message_type(message.json);
    for (auto& fd : message.fds) parts.push_back(std::move(fd));
    if (type == "result") {
      message.fds = std::move(parts);
      return kcoral::decode_result(std::move(message));
    }
    REQUIRE(type == "parts");
  }
  FAIL("no result message");
  return kcoral::fail(kcoral::ErrorKind::engine, "unreachable");
}

kcoral::Blob blob_of(std::string_view data) { return *kcoral::Blob::copy_of(data); }

}  // namespace

TEST_SUITE("worker_protocol") {

TEST_CASE("send_run sends the blobs with their digests, then the run request") {
  auto pair = connected();
  kcoral::BlobMap blobs;
  for (std::string data : {"one", "two", "three"}) blobs.emplace(kcoral::sha256_hex(data), blob_of(data));
  kcoral::RunRequest request{"rid", R"({"instructions":[]})", 77, 88};
  REQUIRE(kcoral::send_run(pair.front, request, blobs).has_value());
  auto messages = drain(pair.worker);
  REQUIRE(messages.size() == 2);
  Json batch = Json::parse(messages[0].json);
  CHECK(batch["type"] == "blobs");
  REQUIRE(batch["digests"].size() == 3);
  REQUIRE(messages[0].fds.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    auto received = kcoral::Blob::from_fd(std::move(messages[0].fds[i]));
    REQUIRE(received.has_value());
    CHECK(kcoral::sha256_hex(received->view()) == batch["digests"][i].get<std::string>());
  }
  Json run = Json::parse(messages[1].json);
  CHECK(run == Json{{"type", "run"}, {"request_id", "rid"}, {"output_limit_bytes", 77}, {"max_binary_bytes", 88},
                    {"program", R"({"instructions":[]})"}});
  CHECK(messages[1].fds.empty());
}

TEST_CASE("send_run without blobs sends the run request alone") {
  auto pair = connected();
  REQUIRE(kcoral::send_run(pair.front, {"r", "{}", 1, 2}, {}).has_value());
  auto messages = drain(pair.worker);
  REQUIRE(messages.size() == 1);
  CHECK(kcoral::message_type(messages[0].json) == "run");
}

TEST_CASE("many blobs travel in batches under the descriptor limit") {
  auto pair = connected();
  kcoral::BlobMap blobs;
  for (int i = 0; i < 300; ++i) {
    std::string data = "blob " + std::to_string(i);
    blobs.emplace(kcoral::sha256_hex(data), blob_of(data));
  }
  REQUIRE(kcoral::send_run(pair.front, {"r", "{}", 1, 2}, blobs).has_value());
  auto messages = drain(pair.worker);
  REQUIRE(messages.size() == 3);
  std::size_t total = 0;
  for (std::size_t m = 0; m < 2; ++m) {
    Json batch = Json::parse(messages[m].json);
    CHECK(batch["type"] == "blobs");
    CHECK(batch["digests"].size() == messages[m].fds.size());
    CHECK(messages[m].fds.size() < Channel::kMaxFds);
    total += messages[m].fds.size();
  }
  CHECK(total == 300);
  CHECK(kcoral::message_type(messages[2].json) == "run");
}

TEST_CASE("send_run over the pool's non-blocking channel delivers thousands of blobs") {
  auto pair = connected();  // the front's end non-blocking, as the pool makes it
  ::fcntl(pair.worker.fd(), F_SETFL, 0);  // the worker blocks in receive, reading eagerly
  kcoral::Blob shared = blob_of("one memfd for every digest");
  kcoral::BlobMap blobs;
  for (int i = 0; i < 20000; ++i) blobs.emplace(kcoral::sha256_hex(std::to_string(i)), shared);
  std::size_t received_fds = 0;
  std::thread worker([&] {
    while (true) {
      auto message = pair.worker.receive();
      if (!message || !*message) return;  // the front gave up and closed
      received_fds += (*message)->fds.size();
      if (kcoral::message_type((*message)->json) == "run") return;
    }
  });
  auto sent = kcoral::send_run(pair.front, {"r", "{}", 1, 2}, blobs);
  (void)pair.front.release_socket();  // lets a waiting worker see the end
  worker.join();
  CHECK_MESSAGE(sent.has_value(), (sent ? std::string() : sent.error().message));
  CHECK(received_fds == 20000);
}

TEST_CASE("a completed result round-trips with its outputs, timing and parts") {
  auto pair = connected();
  kcoral::ProgramResult result;
  result.results_json = R"({"x":{"type":"integer","value":1180591620717411303424}})";
  result.stdout_output = {"out \xe2\x98\x83", true};
  result.stderr_output = {"err", false};
  result.elapsed_ms = 12.5;
  result.parts = {blob_of("part 0"), blob_of(""), blob_of(std::string(100000, 'p'))};
  REQUIRE(kcoral::send_result(pair.worker, result).has_value());
  auto decoded = receive_result(pair.front);
  REQUIRE_MESSAGE(decoded.has_value(), decoded.error().message);
  CHECK(decoded->results_json == result.results_json);
  CHECK(decoded->stdout_output.text == "out \xe2\x98\x83");
  CHECK(decoded->stdout_output.truncated);
  CHECK(decoded->stderr_output.text == "err");
  CHECK_FALSE(decoded->stderr_output.truncated);
  CHECK(decoded->elapsed_ms == 12.5);
  CHECK(decoded->completed());
  REQUIRE(decoded->parts.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(decoded->parts[i].view() == result.parts[i].view());
}

TEST_CASE("a failed result round-trips its error") {
  auto pair = connected();
  kcoral::ProgramResult result;
  result.error = kcoral::InstructionError{kcoral::ErrorKind::correctness, "AssertionError: off", 4, "run", "check",
                                          "Traceback\n", std::nullopt};
  REQUIRE(kcoral::send_result(pair.worker, result).has_value());
  auto decoded = receive_result(pair.front);
  REQUIRE(decoded.has_value());
  REQUIRE(decoded->error.has_value());
  const auto& error = *decoded->error;
  CHECK(error.kind == kcoral::ErrorKind::correctness);
  CHECK(error.message == "AssertionError: off");
  CHECK(error.instruction_index == 4);
  CHECK(error.instruction_op == "run");
  CHECK(error.instruction_id == std::optional<std::string>("check"));
  CHECK(error.traceback == "Traceback\n");
  CHECK_FALSE(error.gpu_access.has_value());
}

TEST_CASE("an error without an id and a gpu_access error round-trip") {
  auto pair = connected();
  kcoral::ProgramResult result;
  result.error = kcoral::InstructionError{kcoral::ErrorKind::gpu_access, "m", 0, "return", std::nullopt, "",
                                          kcoral::GpuAccessDetail{"cuLaunchKernel", "k.py:3", std::nullopt}};
  REQUIRE(kcoral::send_result(pair.worker, result).has_value());
  auto decoded = receive_result(pair.front);
  REQUIRE(decoded.has_value());
  CHECK_FALSE(decoded->error->instruction_id.has_value());
  REQUIRE(decoded->error->gpu_access.has_value());
  CHECK(decoded->error->gpu_access->cuda_call == "cuLaunchKernel");
  CHECK(decoded->error->gpu_access->location == "k.py:3");
}

TEST_CASE("parts beyond one message's descriptor budget go first, in order") {
  auto pair = connected();
  kcoral::ProgramResult result;
  for (int i = 0; i < 300; ++i) result.parts.push_back(blob_of("part " + std::to_string(i)));
  REQUIRE(kcoral::send_result(pair.worker, result).has_value());
  auto decoded = receive_result(pair.front);
  REQUIRE(decoded.has_value());
  REQUIRE(decoded->parts.size() == 300);
  for (int i = 0; i < 300; ++i) CHECK(decoded->parts[static_cast<std::size_t>(i)].view() == "part " + std::to_string(i));
}

TEST_CASE("a result text over 48 KiB arrives through the spill") {
  auto pair = connected();
  kcoral::ProgramResult result;
  result.stdout_output.text = std::string(200000, 'o');
  REQUIRE(kcoral::send_result(pair.worker, result).has_value());
  auto decoded = receive_result(pair.front);
  REQUIRE(decoded.has_value());
  CHECK(decoded->stdout_output.text.size() == 200000);
}

TEST_CASE("output that is not UTF-8 does not stop a result from being sent") {
  auto pair = connected();
  kcoral::ProgramResult result;
  result.stdout_output.text = "bad \xff byte";
  REQUIRE(kcoral::send_result(pair.worker, result).has_value());
  auto decoded = receive_result(pair.front);
  REQUIRE(decoded.has_value());
  CHECK(decoded->stdout_output.text.rfind("bad ", 0) == 0);
}

TEST_CASE("malformed results fail with engine") {
  for (const char* json : {"", "not json", "[]", R"({"type":"result"})",
                           R"({"type":"result","results":1,"stdout":"","stdout_truncated":false,"stderr":"","stderr_truncated":false,"elapsed_ms":0})",
                           R"({"type":"result","results":"{}","stdout":"","stdout_truncated":false,"stderr":"","stderr_truncated":false,"elapsed_ms":0,"error":{"kind":"runtime"}})"}) {
    CAPTURE(json);
    auto decoded = kcoral::decode_result({json, {}});
    REQUIRE_FALSE(decoded.has_value());
    CHECK(decoded.error().kind == kcoral::ErrorKind::engine);
  }
}

TEST_CASE("an unknown error kind from a worker becomes engine") {
  auto decoded = kcoral::decode_result(
      {R"({"results":"{}","stdout":"","stdout_truncated":false,"stderr":"","stderr_truncated":false,"elapsed_ms":0,)"
       R"("error":{"kind":"bogus","message":"m","index":1,"op":"run","traceback":""}})",
       {}});
  REQUIRE(decoded.has_value());
  CHECK(decoded->error->kind == kcoral::ErrorKind::engine);
}

TEST_CASE("message_type reads the type of an object, else gives the empty string") {
  CHECK(kcoral::message_type(R"({"type":"ready","versions":{}})") == "ready");
  CHECK(kcoral::message_type(R"({"index":3})").empty());
  CHECK(kcoral::message_type(R"({"type":3})").empty());
  CHECK(kcoral::message_type(R"(["type"])").empty());
  CHECK(kcoral::message_type("not json").empty());
  CHECK(kcoral::message_type("").empty());
}

}  // TEST_SUITE
