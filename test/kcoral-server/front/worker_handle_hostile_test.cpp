// WorkerHandle against a hostile worker: every message a worker may not send in its state,
// every malformed one, every bad result part, a message other than a result padded past a
// few kilobytes, a flood of messages, and any message from an idle worker kills the
// process and fails that job with `engine` (and only that job); a worker of several GPUs
// killed so gives every one of them back at once; returned values pass as JSON whatever
// the size of their numbers.
#include "kcoral/sha256.hpp"
#include "worker_handle_support.hpp"

using kcoral::WorkerHandle;
using kcoral::test::Harness;
using kcoral::test::make_job;
using kcoral::test::memfd_with;
using kcoral::test::completed;
namespace messages = kcoral::messages;

namespace {

// A harness whose worker answers its job with a completed result carrying `values` as its
// returned values, and no parts.
void answer_with_values(Harness& h, const std::string& values) {
  h.take(make_job());
  messages::RunResult result = completed();
  result.results = values;
  h.send(result);
}

}  // namespace

TEST_SUITE("worker_handle") {

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
           {"a front message without its memfd", R"({"type":"run","request_id":"x","output_limit_bytes":1,"max_returned_bytes":1})",
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

TEST_CASE("a worker of several GPUs that breaks the protocol holding them all gives every one back as it is killed") {
  Harness h(1, 1 << 20, std::chrono::seconds(60), {0, 1});
  h.take(make_job());
  h.send(messages::Lease{true});
  CHECK(std::holds_alternative<messages::LeaseGranted>(h.receive().message));
  bool other_granted = false;  // another worker's program waits for GPU 1
  REQUIRE(h.leases.acquire_program({1}, 2, [&] { other_granted = true; }).has_value());
  CHECK_FALSE(other_granted);
  h.send(messages::Lease{true});  // asked twice: killed
  CHECK(h.engine_error().find("asked twice for the GPU lease") != std::string::npos);
  CHECK(h.killed());
  CHECK(other_granted);  // GPU 1 went straight to the waiter
  CHECK(!h.leases.program_holder({0}, 2).has_value());  // and GPU 0 is held by nobody
  CHECK(h.leases.program_holder({1}, 0) == 2);
}

TEST_CASE("returned values pass as JSON whatever the size of their numbers") {
  const std::string big = "1" + std::string(400, '0');
  for (std::string results : {R"({"a":{"type":"integer","value":)" + big + "}}",
                              std::string(R"({"a":[1e400,-1e-400,-0.0,0,-7,5E+3,"\u0000",true,false,null,{}]})")}) {
    CAPTURE(results.substr(0, 60));
    Harness h;
    answer_with_values(h, results);
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
  SUBCASE("parts naming a blob the program was not given, or given but of another size, or more names than parts") {
    // A worker may name only its own program's blobs: never another request's, another
    // tenant's, or one the front holds for nobody this worker serves.
    const std::string given = "given", other = "another request's";
    struct Case {
      std::vector<std::uint64_t> sizes;
      std::vector<std::string> names;
      const char* why;
    };
    for (const Case& c : std::vector<Case>{
             {{other.size()}, {kcoral::sha256_hex(other)}, "not given"},
             {{given.size() + 1}, {kcoral::sha256_hex(given)}, "not given"},
             {{given.size()}, {kcoral::sha256_hex(given), ""}, "naming blobs for other parts"},
             {{given.size(), 1}, {kcoral::sha256_hex(given)}, "naming blobs for other parts"},
         }) {
      CAPTURE(c.why);
      Harness h;
      auto job = make_job();
      job->admitted.blobs.emplace(kcoral::sha256_hex(given), *kcoral::Blob::copy_of(given));
      h.take(job);
      messages::RunResult result = completed(c.sizes);
      result.part_blobs = c.names;
      auto parts = memfd_with("x", true);
      bool in_file = c.sizes.size() > 1 || c.names.size() < c.sizes.size();
      h.send(result, in_file ? std::vector<int>{parts.get()} : std::vector<int>{});
      CHECK(h.engine_error().find(c.why) != std::string::npos);
      CHECK(h.killed());
    }
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
      answer_with_values(h, results);
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
  SUBCASE("output that is not UTF-8, which would grow threefold as it is written") {
    for (bool on_stderr : {false, true}) {
      Harness h;
      h.take(make_job());
      messages::RunResult result = completed();
      (on_stderr ? result.stderr_text : result.stdout_text) = "ok \xff\xfe\xc3";
      h.send(result);
      CHECK(h.engine_error().find("output is not UTF-8") != std::string::npos);
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

TEST_CASE("an error's message and traceback of megabytes are cut as the executor cuts them") {
  Harness h(1, std::size_t{8} << 20);
  h.take(make_job());
  messages::RunResult result = completed();
  const std::string long_text = "\xc3\xa9" + std::string(std::size_t{1} << 20, 'x');
  result.error = messages::ErrorDetail{kcoral::ErrorKind::runtime, long_text, 2, "run", long_text, std::nullopt,
                                       std::nullopt, std::nullopt};
  h.send(result);
  REQUIRE(h.pump([&] { return h.outcome.has_value(); }));
  REQUIRE(h.outcome->result.has_value());
  const kcoral::InstructionError& error = *h.outcome->result->error;
  CHECK(error.message.size() < kcoral::kErrorMessageBytes + 64);
  CHECK(error.message.starts_with("\xc3\xa9xxx"));
  CHECK(error.message.ends_with("... (" + std::to_string(long_text.size() - kcoral::kErrorMessageBytes) +
                                " more bytes cut)"));
  CHECK(error.traceback == std::string(kcoral::kTracebackBytes, 'x'));
}

TEST_CASE("a message other than a result, padded past its few kilobytes, kills the worker") {
  // Three of them an instruction: padded to a megabyte each, they would have the front
  // parse gigabytes on the strand that every worker shares.
  Harness h;
  h.take(make_job());
  h.send_text(R"({"type":"progress","index":0)" + std::string(std::size_t{8} << 10, ' ') + "}");
  CHECK(h.engine_error().find("a 'progress' message of 8") != std::string::npos);
  CHECK(h.killed());
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

}  // TEST_SUITE
