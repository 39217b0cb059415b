// The channel messages (kcoral-server/channel/messages.cpp): every message round-trips
// with its fields; the wire names are one table; the decoder refuses what is not exactly
// a message: not JSON, no or unknown type, a missing field, a field of the wrong type or
// out of range, an unknown field (nested ones too), and a descriptor count other than
// the message's own.
#include <doctest/doctest.h>

#include <cstdint>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <set>

#include "messages.hpp"

namespace messages = kcoral::messages;

namespace {

// One of each message, every field set to something other than its default.
std::vector<messages::Message> one_of_each() {
  messages::RunResult result{true, R"({"out":{"type":"int","value":"1"}})", "out ü", true, "err", false, 12.5, {3, 0, 7},
                      messages::ErrorDetail{kcoral::ErrorKind::runtime, "boom", 2, "run", "Traceback...", "r", "cuLaunchKernel", "x.py:3"},
                      "threads: 3 after the program, 2 before", true, {"", "ab", ""}};
  return {messages::Fork{"GPU-1234", 1, true, false},
          messages::ZygoteReady{{{"python", "3.11"}, {"numpy", "2.0"}}, {4243, 4244}},
          messages::Forked{4242},
          messages::Exited{4242, std::nullopt, 9, true},
          messages::ZygoteFailed{"no python"},
          messages::ForkFailed{"socketpair: Too many open files"},
          messages::Blobs{{"aa", "bb"}, {0, 0}, {0, 5}, {5, 3}, 1},
          messages::RunProgram{"rid", 77, 88},
          messages::LeaseGranted{},
          messages::Ready{},
          messages::Progress{3},
          messages::Lease{true},
          messages::InitLease{false},
          messages::GpuAccess{},
          messages::Failed{"no context"},
          result};
}

std::string refusal(std::string_view text, std::size_t descriptors = 0) {
  auto decoded = messages::decode(text, descriptors);
  REQUIRE_MESSAGE(!decoded, text);
  CHECK(decoded.error().kind == kcoral::ErrorKind::engine);
  return decoded.error().message;
}

}  // namespace

TEST_SUITE("messages") {

TEST_CASE("every message round-trips through its text, fields and all") {
  auto messages = one_of_each();
  REQUIRE(messages.size() == std::variant_size_v<messages::Message>);
  for (const messages::Message& message : messages) {
    CAPTURE(messages::name_of(message));
    std::string text = messages::encode(message);
    auto decoded = messages::decode(text, messages::descriptor_count(message));
    REQUIRE_MESSAGE(decoded.has_value(), decoded.error().message);
    CHECK(decoded->index() == message.index());
    CHECK(messages::encode(*decoded) == text);
  }
}

TEST_CASE("the fields come back as they were sent") {
  auto decoded = messages::decode(messages::encode(one_of_each().back()), 1);
  REQUIRE(decoded.has_value());
  const auto& result = std::get<messages::RunResult>(*decoded);
  CHECK(result.continues);
  CHECK(result.stdout_text == "out ü");
  CHECK(result.part_sizes == std::vector<std::uint64_t>{3, 0, 7});
  CHECK(result.part_blobs == std::vector<std::string>{"", "ab", ""});
  REQUIRE(result.error.has_value());
  CHECK(result.error->index == 2);
  CHECK(result.error->id == "r");
  CHECK(result.error->location == "x.py:3");
  auto fork = std::get<messages::Fork>(*messages::decode(messages::encode(one_of_each().front()), 0));
  CHECK(fork.refuse_multi_stream);
  CHECK_FALSE(fork.warm_up);
  auto exited = std::get<messages::Exited>(*messages::decode(R"({"type":"exited","pid":7,"signal":9})", 0));
  CHECK(!exited.exit_code.has_value());
  CHECK(exited.signal == 9);
}

TEST_CASE("a result's output follows its values as it is, whatever its bytes") {
  messages::RunResult result;
  result.results = R"({"out":{"type":"str","value":"a\nb"}})";
  result.stdout_text = std::string("ok \xff\xfe end\n{}\n");
  result.stderr_text = "\n";
  std::string text = messages::encode(result);
  CHECK(text.ends_with("\n" + result.results + result.stdout_text + result.stderr_text));
  auto decoded = messages::decode_in_place(std::move(text), 0);
  REQUIRE(decoded.has_value());
  const auto& back = std::get<messages::RunResult>(*decoded);
  CHECK(back.results == result.results);
  CHECK(back.stdout_text == result.stdout_text);
  CHECK(back.stderr_text == "\n");
}

TEST_CASE("a result whose output sizes pass what follows its object is refused") {
  messages::RunResult result;
  result.stdout_text = "12345";
  std::string text = messages::encode(result);
  for (auto [from, to] : {std::pair<std::string, std::string>{R"("stdout_bytes":5)", R"("stdout_bytes":9)"},
                          {R"("stderr_bytes":0)", R"("stderr_bytes":18446744073709551615)"},
                          {R"("stderr_bytes":0)", R"("stderr_bytes":-1)"},
                          {R"("stderr_bytes":0,)", ""}}) {
    std::string changed = text;
    REQUIRE(changed.find(from) != std::string::npos);
    changed.replace(changed.find(from), from.size(), to);
    CAPTURE(changed);
    CHECK_FALSE(messages::decode(changed, 0).has_value());
  }
}

TEST_CASE("the wire names are unique and name their message") {
  std::set<std::string_view> names(messages::kNames.begin(), messages::kNames.end());
  CHECK(names.size() == messages::kNames.size());
  for (const messages::Message& message : one_of_each())
    CHECK(messages::encode(message).find(R"("type":")" + std::string(messages::name_of(message)) + "\"") != std::string::npos);
}

TEST_CASE("descriptor counts: blobs their file count, forked one, a result with parts one") {
  CHECK(messages::descriptor_count(messages::Blobs{{"a", "b", "c"}, {0, 1, 1}, {0, 0, 4}, {1, 4, 4}, 2}) == 2);
  CHECK(messages::descriptor_count(messages::Forked{2}) == 2);
  CHECK(messages::descriptor_count(messages::RunResult{}) == 0);
  messages::RunResult with_parts;
  with_parts.part_sizes = {0};
  CHECK(messages::descriptor_count(with_parts) == 1);
  with_parts.part_blobs = {"a"};  // its one part one of the program's blobs: no memfd
  CHECK(messages::descriptor_count(with_parts) == 0);
  with_parts.part_sizes = {0, 1};
  with_parts.part_blobs = {"a", ""};
  CHECK(messages::descriptor_count(with_parts) == 1);
  CHECK(messages::descriptor_count(messages::Ready{}) == 0);
}

TEST_CASE("what is not a typed JSON object is refused") {
  CHECK(refusal("").find("not a JSON object") != std::string::npos);
  CHECK(refusal("[1]").find("not a JSON object") != std::string::npos);
  CHECK(refusal(R"({"type":"ready"} trailing)").find("not a JSON object") != std::string::npos);
  CHECK(refusal(R"({"index":1})").find("no type") != std::string::npos);
  CHECK(refusal(R"({"type":7})").find("no type") != std::string::npos);
  CHECK(refusal(R"({"type":"take_over"})").find("unknown channel message type 'take_over'") != std::string::npos);
}

TEST_CASE("a missing field is refused, not defaulted") {
  CHECK(refusal(R"({"type":"progress"})") == "a 'progress' message: 'index' is missing");
  CHECK(refusal(R"({"type":"lease"})") == "a 'lease' message: 'acquire' is missing");
  CHECK(refusal(R"({"type":"forked"})", 1) == "a 'forked' message: 'pid' is missing");
}

TEST_CASE("a field of the wrong type or out of range is refused") {
  CHECK(refusal(R"({"type":"progress","index":"3"})") == "a 'progress' message: 'index' must be a non-negative integer");
  CHECK(refusal(R"({"type":"progress","index":-1})").find("non-negative integer") != std::string::npos);
  CHECK(refusal(R"({"type":"progress","index":1.5})").find("non-negative integer") != std::string::npos);
  CHECK(refusal(R"({"type":"progress","index":null})").find("non-negative integer") != std::string::npos);
  CHECK(refusal(R"({"type":"lease","acquire":1})") == "a 'lease' message: 'acquire' must be true or false");
  CHECK(refusal(R"({"type":"forked","pid":18446744073709551615})", 1).find("out of range") != std::string::npos);
  CHECK(refusal(R"({"type":"blobs","digests":["a",2]})", 2) == "a 'blobs' message: 'digests' [1] must be a string");
  CHECK(refusal(R"({"type":"zygote_ready","versions":{"numpy":2}})").find("'numpy' must be a string") !=
        std::string::npos);
}

TEST_CASE("an unknown field is refused, at the top and inside the error") {
  CHECK(refusal(R"({"type":"ready","continues":true})") == "a 'ready' message: has a field it does not define");
  CHECK(refusal(R"({"type":"progress","index":1,"request_id":"x"})").find("does not define") != std::string::npos);
  messages::RunResult result;
  result.error = messages::ErrorDetail{kcoral::ErrorKind::runtime, "m", 0, "run", "", std::nullopt, std::nullopt, std::nullopt};
  std::string text = messages::encode(result);
  auto at = text.find(R"("kind":)");
  REQUIRE(at != std::string::npos);
  text.insert(at, R"("severity":"high",)");
  CHECK(refusal(text).find("'error' has a field it does not define") != std::string::npos);
}

TEST_CASE("an error kind the protocol does not name is refused as the frame is read") {
  messages::RunResult result;
  result.error = messages::ErrorDetail{kcoral::ErrorKind::gpu_access, "m", 0, "run", "", std::nullopt, "cuInit", "f.py:1"};
  std::string text = messages::encode(result);
  const std::string kind = R"("kind":"gpu_access")";
  auto at = text.find(kind);
  REQUIRE(at != std::string::npos);
  for (std::string other : {std::string(R"("kind":"made_up")"), std::string(R"("kind":"")"),
                            std::string(R"("kind":7)"), std::string(R"("kind":"RUNTIME")"),
                            R"("kind":")" + std::string(4 << 20, 'r') + "\""}) {  // 4 MiB of a name
    std::string changed = text;
    changed.replace(at, kind.size(), other);
    CHECK(refusal(changed).find("'kind' must be an error kind's name") != std::string::npos);
  }
  auto decoded = messages::decode(text, 0);
  REQUIRE(decoded);
  CHECK(std::get<messages::RunResult>(*decoded).error->kind == kcoral::ErrorKind::gpu_access);
}

TEST_CASE("nesting past a message's own and floods of values are refused as they are read") {
  // A field nested a million deep, or a part table of millions of entries, in frames a
  // hostile worker can send: refused without a tree of their size (nor recursion).
  const std::string result_head = R"({"type":"result","continues":false,"stdout_bytes":0,)"
                                  R"("stdout_truncated":false,"stderr_bytes":0,"stderr_truncated":false,"elapsed_ms":0,)";
  for (std::string text : {R"({"type":"progress","index":)" + std::string(1000000, '[') + std::string(1000000, ']') + "}",
                           std::string(R"({"type":"failed","message":{"a":{"b":"c"}}})"),
                           result_head + R"("part_sizes":[[1]]})" + "\n{}",
                           result_head + R"("part_sizes":[)" + [] {
                             std::string many = "0";
                             for (std::size_t i = 0; i < 3 * messages::kMaxResultParts; ++i) many += ",0";
                             return many;
                           }() + "]}\n{}"}) {
    CAPTURE(text.substr(0, 60));
    auto decoded = messages::decode(text, 0);
    REQUIRE_FALSE(decoded.has_value());
    CHECK(decoded.error().message.find("nested deeper than its fields or with more than") != std::string::npos);
  }
  // The error object is as deep as a message goes.
  auto failed = messages::decode(result_head + R"("part_sizes":[],"error":{"kind":"runtime","message":"m","index":0,)"
                                           R"("op":"run","traceback":""},"retired":"","multi_stream":false,"part_blobs":[]})"
                                           "\n{}",
                             0);
  CHECK(failed.has_value());
}

TEST_CASE("a message with other than its own descriptors is refused") {
  CHECK(refusal(R"({"type":"ready"})", 1) == "a 'ready' message came with 1 descriptors instead of 0");
  CHECK(refusal(R"({"type":"blobs","digests":["a","b"],"files":[0,1],"offsets":[0,0],"sizes":[1,1],"file_count":2})", 1).find("instead of 2") != std::string::npos);
  CHECK(refusal(R"({"type":"forked","pid":5})", 0).find("instead of 2") != std::string::npos);
  std::string result = messages::encode(messages::RunResult{false, "{}", "", false, "", false, 0, {4}, std::nullopt, "", false});
  CHECK(refusal(result, 0).find("instead of 1") != std::string::npos);
}

TEST_CASE("send insists on the message's descriptor count, and receive decodes with the descriptors") {
  auto pair = kcoral::Channel::socket_pair();
  REQUIRE(pair.has_value());
  kcoral::Channel a(std::move(pair->first)), b(std::move(pair->second));
  CHECK(!messages::send(a, messages::Forked{9}));
  kcoral::UniqueFd memfd(::memfd_create("messages-test", MFD_CLOEXEC));
  int fds[2] = {memfd.get(), memfd.get()};
  CHECK(!messages::send(a, messages::Forked{9}, std::span<const int>(fds, 1)));
  REQUIRE(messages::send(a, messages::Forked{9}, std::span<const int>(fds, 2)).has_value());
  ::fcntl(b.fd(), F_SETFL, O_NONBLOCK);
  auto received = messages::receive(b);
  REQUIRE(received.has_value());
  REQUIRE(received->has_value());
  CHECK(std::get<messages::Forked>((*received)->message).pid == 9);
  CHECK((*received)->fds.size() == 2);
  REQUIRE(a.send(R"({"type":"ready","extra":1})").has_value());
  CHECK(!messages::receive(b).has_value());
  auto nothing = messages::receive(b);
  REQUIRE(nothing.has_value());
  CHECK(!nothing->has_value());
}

}  // TEST_SUITE
