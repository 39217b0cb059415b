// Routing (kcoral-server/router.cpp), called without sockets: GET /health and /metrics,
// 404 and 405 with Allow, POST /execute answered at once (parse errors as 400 JSON with
// kind parse, CACHE_MISS, busy while stopping) or turned into a job with clamped timeout
// and output limit, X-Request-ID handling, and finish_execute's responses and statuses.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include "kcoral/request_id.hpp"
#include "kcoral-server/front/server_fixture.hpp"
#include "kcoral/disk_blob_cache.hpp"
#include "libkcoral/temp_dir.hpp"

using kcoral::test::body_of;
using kcoral::test::header;
using kcoral::test::Json;
using kcoral::test::program_with_bytes;
using kcoral::test::ServerFixture;
namespace http = boost::beast::http;

namespace {

std::vector<std::string> keys_of(const Json& object) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.push_back(key);
  return keys;
}

kcoral::OutgoingPart program_part(const std::string& json) { return {"program", "application/json", json}; }

std::string blob_name(const std::string& data) { return "blob:" + kcoral::sha256_hex(data); }

}  // namespace

TEST_SUITE("router") {

TEST_CASE("GET /health reports status, identity, load, target and versions in order") {
  ServerFixture server;
  auto routed = server.get("/health");
  REQUIRE(routed.response.has_value());
  CHECK_FALSE(routed.job);
  const auto& response = *routed.response;
  CHECK(response.result() == http::status::ok);
  CHECK(header(response, "Content-Type") == "application/json");
  CHECK(kcoral::is_canonical_request_id(header(response, "X-Request-ID")));
  Json body = body_of(response);
  CHECK(keys_of(body) == std::vector<std::string>{"status", "instance_id", "started_at", "gpu_count", "load",
                                                  "target", "versions"});
  CHECK(body["status"] == "ok");
  CHECK(body["instance_id"] == "instance-1");
  CHECK(body["started_at"] == "2026-12-02T15:51:55.123456Z");
  CHECK(body["gpu_count"] == 0);
  const auto capacity = server.pool.load().capacity;
  CHECK(capacity >= 1);
  CHECK(body["load"] == Json{{"request_capacity", capacity}, {"requests_in_progress", 0}, {"requests_waiting", 0},
                             {"gpus_in_progress", 0}, {"gpus_waiting", 0}});
  CHECK(body["target"] == Json::object());
  CHECK(body["versions"].is_object());
}

TEST_CASE("/health's load counts programs and their GPUs") {
  ServerFixture server;  // an unstarted pool: a program waits, with no worker to take it
  auto job = std::make_shared<kcoral::ExecuteJob>();
  bool answered = false;
  job->done = [&answered](std::shared_ptr<kcoral::ExecuteJob>, kcoral::JobOutcome) { answered = true; };
  server.pool.submit(job);
  server.io.poll();
  Json load = body_of(*server.get("/health").response)["load"];
  CHECK(load["requests_in_progress"] == 0);
  CHECK(load["requests_waiting"] == 1);
  CHECK(load["gpus_in_progress"] == 0);
  CHECK(load["gpus_waiting"] == 1);  // a program of no gpu_count holds one (a CPU server's too)
  server.pool.drain([] {});
  server.io.restart();
  server.io.poll();
  CHECK(answered);
}

TEST_CASE("a GPU server's /health reports its compute target") {
  ServerFixture server;
  server.state.gpu_count = 1;
  // ServerState gained target_arch with the GPU work; without it there is nothing to test.
  auto set_arch = [](auto& state, const std::string& arch) {
    if constexpr (requires { state.target_arch; }) {
      state.target_arch = arch;
      return true;
    } else {
      return false;
    }
  };
  if (!set_arch(server.state, "sm_90a")) return;
  Json body = body_of(*server.get("/health").response);
  CHECK(body["gpu_count"] == 1);
  CHECK(body["target"] == Json{{"arch", "sm_90a"}});
}

TEST_CASE("a query string does not change the route") {
  ServerFixture server;
  auto routed = server.get("/health?verbose=1");
  REQUIRE(routed.response.has_value());
  CHECK(routed.response->result() == http::status::ok);
}

TEST_CASE("GET /health while stopping answers 503 unavailable with Retry-After") {
  ServerFixture server;
  server.state.stopping = true;
  auto routed = server.get("/health");
  REQUIRE(routed.response.has_value());
  CHECK(routed.response->result() == http::status::service_unavailable);
  CHECK(header(*routed.response, "Retry-After") == "1");
  CHECK(body_of(*routed.response)["status"] == "unavailable");
}

TEST_CASE("GET /metrics is Prometheus text with the pool's load and the cache's size") {
  ServerFixture server;
  server.blobs.put("default", kcoral::sha256_hex("cached"), *kcoral::Blob::copy_of("cached"));
  auto routed = server.get("/metrics");
  REQUIRE(routed.response.has_value());
  CHECK(routed.response->result() == http::status::ok);
  CHECK(header(*routed.response, "Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  const std::string text = routed.response->body().joined();
  CHECK(text.find("kcoral_workers_capacity " + std::to_string(server.pool.load().capacity) + "\n") !=
        std::string::npos);
  CHECK(text.find("kcoral_blob_cache_bytes 6\n") != std::string::npos);
  CHECK(text.find("kcoral_blob_cache_blobs 1\n") != std::string::npos);
  CHECK(text.find("kcoral_other_requests_total 1\n") != std::string::npos);  // this request
}

TEST_CASE("an unknown path is 404 not_found with an ERROR body") {
  ServerFixture server;
  for (const char* target : {"/", "/nope", "/execute/", "/HEALTH", "/health/x"}) {
    CAPTURE(target);
    auto routed = server.get(target);
    REQUIRE(routed.response.has_value());
    CHECK(routed.response->result() == http::status::not_found);
    Json body = body_of(*routed.response);
    CHECK(body["status"] == "ERROR");
    CHECK(body["error"]["kind"] == "not_found");
    CHECK(body["request_id"] == header(*routed.response, "X-Request-ID"));
  }
}

TEST_CASE("a wrong method is 405 method_not_allowed with Allow") {
  ServerFixture server;
  struct Case {
    http::verb verb;
    const char* target;
    const char* allow;
  };
  for (const Case& c : {Case{http::verb::get, "/execute", "POST"}, Case{http::verb::put, "/execute", "POST"},
                        Case{http::verb::post, "/health", "GET"}, Case{http::verb::delete_, "/metrics", "GET"}}) {
    CAPTURE(c.target);
    kcoral::HttpRequest request{c.verb, c.target, 11};
    auto routed = kcoral::route(request, server.state);
    REQUIRE(routed.response.has_value());
    CHECK(routed.response->result() == http::status::method_not_allowed);
    CHECK(header(*routed.response, "Allow") == c.allow);
    CHECK(body_of(*routed.response)["error"]["kind"] == "method_not_allowed");
  }
}

TEST_CASE("a malformed /execute is 400 with kind parse and the same request id in body and header") {
  ServerFixture server;
  kcoral::HttpRequest request{http::verb::post, "/execute", 11};
  request.set(http::field::content_type, "application/json");
  request.body().bytes = R"({"instructions":[]})";
  auto routed = kcoral::route(request, server.state);
  REQUIRE(routed.response.has_value());
  CHECK_FALSE(routed.job);
  CHECK(routed.response->result() == http::status::bad_request);
  CHECK(header(*routed.response, "Content-Type") == "application/json");
  Json body = body_of(*routed.response);
  CHECK(body["status"] == "ERROR");
  CHECK(body["error"]["kind"] == "parse");
  CHECK_FALSE(body["error"]["message"].get<std::string>().empty());
  CHECK(body["request_id"] == header(*routed.response, "X-Request-ID"));
  kcoral::HttpRequest untyped{http::verb::post, "/execute", 11};
  untyped.body().bytes = "--x\r\n";
  auto no_type = kcoral::route(untyped, server.state);
  REQUIRE(no_type.response.has_value());
  CHECK(no_type.response->result() == http::status::bad_request);
}

TEST_CASE("program and blob errors of /execute are 400 parse") {
  ServerFixture server;
  const std::string program = program_with_bytes({"x"});
  for (const auto& parts : std::vector<std::vector<kcoral::OutgoingPart>>{
           {program_part(R"({"instructions":[{"op":"nope"}]})")},
           {program_part(program), {blob_name("x"), "application/octet-stream", "not x"}},
           {program_part(program), {blob_name("unused"), "application/octet-stream", "unused"}},
           {{"program", "text/plain", program}},
           {{blob_name("x"), "application/octet-stream", "x"}}}) {
    auto routed = server.execute(parts);
    REQUIRE(routed.response.has_value());
    CHECK(routed.response->result() == http::status::bad_request);
    CHECK(body_of(*routed.response)["error"]["kind"] == "parse");
  }
  // A tensor blob of the wrong size is caught while resolving blobs.
  const std::string tensor = R"({"instructions":[{"op":"upload","id":"t","kind":"tensor","blob":")" +
                             kcoral::sha256_hex("abc") + R"(","dtype":"int32","shape":[1]}]})";
  auto routed = server.execute({program_part(tensor), {blob_name("abc"), "application/octet-stream", "abc"}});
  REQUIRE(routed.response.has_value());
  CHECK(routed.response->result() == http::status::bad_request);
}

TEST_CASE("missing blobs are a 200 CACHE_MISS listing them; supplied ones are cached") {
  ServerFixture server;
  const std::string program = program_with_bytes({"have", "missing", "also missing"});
  auto routed = server.execute({program_part(program), {blob_name("have"), "application/octet-stream", "have"}});
  REQUIRE(routed.response.has_value());
  CHECK(routed.response->result() == http::status::ok);
  Json body = body_of(*routed.response);
  CHECK(body["status"] == "CACHE_MISS");
  CHECK(body["missing_blobs"] == Json::array({kcoral::sha256_hex("missing"), kcoral::sha256_hex("also missing")}));
  CHECK(body["request_id"] == header(*routed.response, "X-Request-ID"));
  // Sending the rest completes the set: the cached blob need not come again.
  auto again = server.execute({program_part(program), {blob_name("missing"), "application/octet-stream", "missing"},
                               {blob_name("also missing"), "application/octet-stream", "also missing"}});
  CHECK_FALSE(again.response.has_value());
  REQUIRE(again.job);
  CHECK(again.job->admitted.blobs.size() == 3);
  CHECK(again.job->admitted.blobs.at(kcoral::sha256_hex("have")).view() == "have");
}

namespace {

// 32 small blobs sent in one request and kept in a disk cache too; then, in the memory of a
// server started again, programs naming some of them: each is read back from the disk into
// a memfd of its own.
struct KeptOnDisk {
  kcoral::test::TempDir dir;
  std::unique_ptr<kcoral::DiskBlobCache> disk;
  std::vector<std::string> datas;
  std::optional<ServerFixture> server;
  KeptOnDisk() {
    auto opened = kcoral::DiskBlobCache::open(dir / "disk", std::uint64_t{64} << 20, 1024);
    REQUIRE(opened.has_value());
    disk = std::move(*opened);
    for (int i = 0; i < 32; ++i) datas.push_back("blob " + std::to_string(i));
    const std::string program = program_with_bytes(datas);
    std::vector<std::string> names;
    for (const std::string& data : datas) names.push_back(blob_name(data));
    std::vector<kcoral::OutgoingPart> parts{program_part(program)};
    for (std::size_t i = 0; i < datas.size(); ++i) parts.push_back({names[i], "application/octet-stream", datas[i]});
    {
      ServerFixture first({}, disk.get());
      REQUIRE(first.execute(parts).job);
    }
    disk->flush();
    server.emplace(kcoral::Tenants{}, disk.get());
  }
  kcoral::RouteResult naming(std::size_t count) {
    const std::string text = program_with_bytes({datas.begin(), datas.begin() + static_cast<std::ptrdiff_t>(count)});
    return server->execute({program_part(text)});
  }
};

}  // namespace

TEST_CASE("an admission that reads 16 blobs or more back from the disk cache, however small, is a long step") {
  KeptOnDisk kept;
  CHECK(kept.naming(kcoral::kLongStepBlobs - 1).job);
  KeptOnDisk again;
  auto many = again.naming(kcoral::kLongStepBlobs);
  CHECK_FALSE(many.job);
  CHECK_FALSE(many.response.has_value());
  REQUIRE(many.rest);
  auto admitted = many.rest();
  REQUIRE(admitted.job);
  CHECK(admitted.job->admitted.blobs.size() == kcoral::kLongStepBlobs);
}

TEST_CASE("a program whose blobs are in more memory files than a worker may hold is 413, never handed over") {
  KeptOnDisk kept;
  kept.server->config.sandbox_policy.open_files = 8;  // half for the worker itself, four for the blobs
  CHECK(kept.naming(4).job);
  KeptOnDisk again;
  again.server->config.sandbox_policy.open_files = 8;
  auto refused = again.naming(5);
  REQUIRE(refused.response.has_value());
  CHECK(refused.response->result() == http::status::payload_too_large);
  Json body = body_of(*refused.response);
  CHECK(body["error"]["kind"] == "request_too_large");
  CHECK(body["error"]["message"].get<std::string>().find("5 blobs are in 5 memory files") != std::string::npos);
}

TEST_CASE("a complete /execute becomes a job with defaults taken from the config") {
  ServerFixture server;
  const std::string program = program_with_bytes({"data"});
  auto routed = server.execute({program_part(program), {blob_name("data"), "application/octet-stream", "data"}});
  CHECK_FALSE(routed.response.has_value());
  REQUIRE(routed.job);
  const kcoral::ExecuteJob& job = *routed.job;
  CHECK(kcoral::is_canonical_request_id(job.request_id));
  // The program's text, sealed in a memfd of its own at admission for the worker, not at
  // its dispatch on the pool's strand.
  REQUIRE(job.program_text.valid());
  CHECK((::fcntl(job.program_text.get(), F_GET_SEALS) & F_SEAL_WRITE) != 0);
  std::string text(program.size() + 1, '\0');
  CHECK(::pread(job.program_text.get(), text.data(), text.size(), 0) == static_cast<ssize_t>(program.size()));
  text.resize(program.size());
  CHECK(text == program);
  CHECK(job.admitted.program_json.empty());
  CHECK(job.admitted.program.instructions().size() == 1);
  CHECK(job.admitted.blobs.at(kcoral::sha256_hex("data")).view() == "data");
  CHECK(job.admitted.timeout_seconds == server.config.default_timeout_seconds);
  CHECK(job.admitted.output_limit_bytes == server.config.default_output_limit_bytes);
  CHECK(job.admitted.max_returned_bytes == server.config.max_response_bytes);
}

TEST_CASE("a job's timeout and output limit are clamped to the server maximum") {
  ServerFixture server;
  auto job_with = [&](const std::string& options) {
    auto routed = server.execute({program_part(program_with_bytes({"d"}, options)),
                                  {blob_name("d"), "application/octet-stream", "d"}});
    REQUIRE(routed.job);
    return routed.job;
  };
  auto big = job_with(R"({"timeout_seconds":100000,"output_limit_bytes":1099511627776})");
  CHECK(big->admitted.timeout_seconds == server.config.max_timeout_seconds);
  CHECK(big->admitted.output_limit_bytes == server.config.max_output_limit_bytes);
  auto small = job_with(R"({"timeout_seconds":0.5,"output_limit_bytes":0})");
  CHECK(small->admitted.timeout_seconds == 0.5);
  CHECK(small->admitted.output_limit_bytes == 0);
}

TEST_CASE("while stopping, /execute is 503 busy with Retry-After") {
  ServerFixture server;
  server.state.stopping = true;
  auto routed = server.execute({program_part(program_with_bytes({"d"}))});
  REQUIRE(routed.response.has_value());
  CHECK(routed.response->result() == http::status::service_unavailable);
  CHECK(header(*routed.response, "Retry-After") == "1");
  CHECK(body_of(*routed.response)["error"]["kind"] == "busy");
}

TEST_CASE("while stopping, answers to other requests close the connection") {
  ServerFixture server;
  server.state.stopping = true;
  for (const char* target : {"/metrics", "/nope"}) {
    CAPTURE(target);
    auto routed = server.get(target);
    REQUIRE(routed.response.has_value());
    CHECK_FALSE(routed.response->keep_alive());
  }
}

TEST_CASE("while stopping, /health and /execute answers close the connection too") {
  ServerFixture server;
  server.state.stopping = true;
  auto health = server.get("/health");
  REQUIRE(health.response.has_value());
  CHECK_FALSE(health.response->keep_alive());
  auto execute = server.execute({program_part(program_with_bytes({"d"}))});
  REQUIRE(execute.response.has_value());
  CHECK_FALSE(execute.response->keep_alive());
}

TEST_CASE("a canonical X-Request-ID is echoed; anything else is replaced by a fresh one") {
  ServerFixture server;
  const std::string id = "123e4567-e89b-42d3-a456-426614174000";
  auto kept = server.execute({program_part(program_with_bytes({"d"}))}, id);
  REQUIRE(kept.response.has_value());  // CACHE_MISS
  CHECK(header(*kept.response, "X-Request-ID") == id);
  CHECK(body_of(*kept.response)["request_id"] == id);
  auto job = server.execute({program_part(program_with_bytes({"d"})), {blob_name("d"), "application/octet-stream", "d"}}, id);
  REQUIRE(job.job);
  CHECK(job.job->request_id == id);
  for (const char* bad : {"123E4567-E89B-42D3-A456-426614174000", "{123e4567-e89b-42d3-a456-426614174000}",
                          "request-7", "123e4567e89b42d3a456426614174000"}) {
    CAPTURE(bad);
    kcoral::HttpRequest request{http::verb::get, "/health", 11};
    request.set("X-Request-ID", bad);
    auto routed = kcoral::route(request, server.state);
    REQUIRE(routed.response.has_value());
    std::string replaced = header(*routed.response, "X-Request-ID");
    CHECK(replaced != bad);
    CHECK(kcoral::is_canonical_request_id(replaced));
  }
  kcoral::HttpRequest twice{http::verb::get, "/nope", 11};
  twice.insert("X-Request-ID", id);
  twice.insert("X-Request-ID", id);
  auto routed = kcoral::route(twice, server.state);
  CHECK(header(*routed.response, "X-Request-ID") != id);
  CHECK(body_of(*routed.response)["request_id"] == header(*routed.response, "X-Request-ID"));
}

TEST_CASE("finish_execute answers a completed job with the program response") {
  ServerFixture server;
  kcoral::ExecuteJob job;
  job.request_id = "123e4567-e89b-42d3-a456-426614174000";
  kcoral::ProgramResult result;
  result.results_json = R"({"v":{"type":"integer","value":1}})";
  auto response = kcoral::finish_execute(job, {result, {1, 2, 3, 4}}, server.state, 11, true);
  CHECK(response.result() == http::status::ok);
  CHECK(header(response, "X-Request-ID") == job.request_id);
  CHECK(response.keep_alive());
  Json body = body_of(response);
  CHECK(body["status"] == "COMPLETED");
  CHECK(body["request_id"] == job.request_id);
  CHECK(body["queue_ms"] == 1.0);
  CHECK(body["lease_held_ms"] == 4.0);
  CHECK(body["results"]["v"]["value"] == 1);
}

TEST_CASE("finish_execute sends binary parts as multipart") {
  ServerFixture server;
  kcoral::ExecuteJob job;
  job.request_id = "r";
  kcoral::ProgramResult result;
  result.results_json = R"({"b":{"type":"bytes","part":"return:0","sha256":"x"}})";
  result.parts.push_back(*kcoral::Blob::copy_of("bytes"));
  auto response = kcoral::finish_execute(job, {result, {}}, server.state, 11, false);
  CHECK(response.result() == http::status::ok);
  CHECK(header(response, "Content-Type").rfind("multipart/form-data; boundary=", 0) == 0);
  CHECK_FALSE(response.keep_alive());
  const std::string body = response.body().joined();
  auto parts = kcoral::parse_multipart(header(response, "Content-Type"), body, {});
  REQUIRE(parts.has_value());
  CHECK((*parts)[1].data == "bytes");
}

TEST_CASE("finish_execute answers request errors with their statuses") {
  ServerFixture server;
  kcoral::ExecuteJob job;
  job.request_id = "r";
  struct Case {
    kcoral::ErrorKind kind;
    http::status status;
  };
  for (const Case& c : {Case{kcoral::ErrorKind::busy, http::status::service_unavailable},
                        Case{kcoral::ErrorKind::timeout, http::status::gateway_timeout},
                        Case{kcoral::ErrorKind::engine, http::status::internal_server_error}}) {
    CAPTURE(kcoral::to_wire(c.kind));
    auto response = kcoral::finish_execute(job, {kcoral::fail(c.kind, "why"), {}}, server.state, 11, true);
    CHECK(response.result() == c.status);
    CHECK(body_of(response)["error"]["kind"] == std::string(kcoral::to_wire(c.kind)));
    CHECK(header(response, "Retry-After") == (c.kind == kcoral::ErrorKind::busy ? "1" : ""));
  }
}

TEST_CASE("a response over max_response_bytes becomes a 500 response_too_large") {
  ServerFixture server;
  server.state.execute.max_response_bytes = 300;
  kcoral::ExecuteJob job;
  job.request_id = "r";
  kcoral::ProgramResult result;
  result.stdout_output.text = std::string(1000, 'o');
  auto response = kcoral::finish_execute(job, {result, {}}, server.state, 11, true);
  CHECK(response.result() == http::status::internal_server_error);
  CHECK(body_of(response)["error"]["kind"] == "response_too_large");
  result.stdout_output.text = "short";
  CHECK(kcoral::finish_execute(job, {result, {}}, server.state, 11, true).result() == http::status::ok);
}

TEST_CASE("/execute outcomes are counted in the metrics") {
  ServerFixture server;
  (void)server.execute({program_part("{")});                       // rejected
  (void)server.execute({program_part(program_with_bytes({"m"}))});  // cache_miss
  kcoral::ExecuteJob job;
  kcoral::ProgramResult failed;
  failed.error = kcoral::InstructionError{kcoral::ErrorKind::runtime, "m", 0, "run", "r", "", {}};
  (void)kcoral::finish_execute(job, {failed, {}}, server.state, 11, true);
  (void)kcoral::finish_execute(job, {kcoral::ProgramResult{}, {}}, server.state, 11, true);
  (void)kcoral::finish_execute(job, {kcoral::fail(kcoral::ErrorKind::timeout, "t"), {}}, server.state, 11, true);
  auto metrics = server.get("/metrics");
  const std::string text = metrics.response->body().joined();
  for (const char* line : {"outcome=\"rejected\"} 1\n", "outcome=\"cache_miss\"} 1\n", "outcome=\"failed\"} 1\n",
                           "outcome=\"completed\"} 1\n", "outcome=\"timeout\"} 1\n", "outcome=\"busy\"} 0\n",
                           "kcoral_execute_duration_seconds_count 5\n"}) {
    CAPTURE(line);
    CHECK(text.find(line) != std::string::npos);
  }
}

TEST_CASE("error_response makes a request id when it has none and uses it in body and header") {
  auto response = kcoral::error_response({kcoral::ErrorKind::request_too_large, "too big"}, 11, false);
  CHECK(response.result() == http::status::payload_too_large);
  std::string id = header(response, "X-Request-ID");
  CHECK(kcoral::is_canonical_request_id(id));
  CHECK(body_of(response)["request_id"] == id);
  auto with_id = kcoral::error_response({kcoral::ErrorKind::parse, "bad"}, 10, false, "given");
  CHECK(header(with_id, "X-Request-ID") == "given");
  CHECK(with_id.version() == 10);
  CHECK(with_id.result() == http::status::bad_request);
}

kcoral::Tenants two_tenants() { return *kcoral::Tenants::parse("alice token-a\nbob token-b\n", "tokens"); }

TEST_CASE("a tenant's blobs are its own: another naming the digest gets the CACHE_MISS of a digest nobody sent") {
  ServerFixture server(two_tenants());
  const std::string secret = "alice's PIN: 4821";
  auto uploaded = server.execute({program_part(program_with_bytes({secret})),
                                  {blob_name(secret), "application/octet-stream", secret}},
                                 {}, "token-a");
  REQUIRE(uploaded.job);
  CHECK(uploaded.job->tenant == 0);
  // Bob names alice's digest and one nobody sent, without either blob.
  auto guessed = server.execute({program_part(program_with_bytes({secret, "nobody's"}))}, {}, "token-b");
  REQUIRE(guessed.response.has_value());
  Json body = body_of(*guessed.response);
  CHECK(body["status"] == "CACHE_MISS");
  CHECK(body["missing_blobs"] == Json::array({kcoral::sha256_hex(secret), kcoral::sha256_hex("nobody's")}));
  // Alice, naming it again without the blob, has it.
  auto again = server.execute({program_part(program_with_bytes({secret}))}, {}, "token-a");
  REQUIRE(again.job);
  CHECK(again.job->admitted.blobs.at(kcoral::sha256_hex(secret)).view() == secret);
  // Bob's own upload of the same bytes runs as his.
  auto bobs = server.execute({program_part(program_with_bytes({secret})),
                              {blob_name(secret), "application/octet-stream", secret}},
                             {}, "token-b");
  REQUIRE(bobs.job);
  CHECK(bobs.job->tenant == 1);
}

TEST_CASE("/execute without an accepted token is refused by the router too, and stores nothing") {
  ServerFixture server(two_tenants());
  const std::string data = "sent without a token";
  for (const std::string& token : {std::string(), std::string("token-c")}) {
    auto routed = server.execute({program_part(program_with_bytes({data})),
                                  {blob_name(data), "application/octet-stream", data}},
                                 {}, token);
    REQUIRE(routed.response.has_value());
    CHECK(routed.response->result() == http::status::unauthorized);
  }
  CHECK(server.blobs.count() == 0);
}

TEST_CASE("/metrics counts each tenant by its name, and never shows a token") {
  ServerFixture server(two_tenants());
  (void)server.execute({program_part(program_with_bytes({"m"}))}, {}, "token-b");  // cache_miss
  (void)server.execute({program_part(program_with_bytes({"d"})), {blob_name("d"), "application/octet-stream", "d"}},
                       {}, "token-a");
  kcoral::ExecuteJob job;
  job.tenant = 1;
  (void)kcoral::finish_execute(job, {kcoral::ProgramResult{}, {2.5, 1, 0, 0}}, server.state, 11, true);
  auto metrics = server.get("/metrics", "token-a");
  REQUIRE(metrics.response.has_value());
  const std::string text = metrics.response->body().joined();
  for (const char* line : {"kcoral_tenant_execute_requests_total{tenant=\"bob\",outcome=\"cache_miss\"} 1\n",
                           "kcoral_tenant_execute_requests_total{tenant=\"bob\",outcome=\"completed\"} 1\n",
                           "kcoral_tenant_execute_requests_total{tenant=\"alice\",outcome=\"completed\"} 0\n",
                           "kcoral_tenant_queue_wait_seconds_total{tenant=\"bob\"} 0.002500\n",
                           "kcoral_tenant_blob_cache_blobs{tenant=\"alice\"} 1\n",
                           "kcoral_tenant_blob_cache_bytes{tenant=\"bob\"} 0\n",
                           "kcoral_tenant_queue_depth{tenant=\"alice\"} 0\n",
                           "kcoral_tenant_inflight_bytes{tenant=\"alice\"} 0\n"}) {
    CAPTURE(line);
    CHECK(text.find(line) != std::string::npos);
  }
  CHECK(text.find("token-") == std::string::npos);
}

}  // TEST_SUITE
