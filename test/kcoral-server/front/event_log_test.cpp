// EventLog (kcoral-server/front/event_log.cpp) and the lines record_execute writes to it:
// past its size a file moves up and the oldest beyond its count goes, a log of another
// name rotates on its own, records that showed no accepted token reach anonymous.jsonl and
// never events.jsonl, every line is ASCII JSON that no line-oriented reader can split, and
// names its tenant as the operator named it, never by its token.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kcoral-server/front/server_fixture.hpp"
#include "libkcoral/temp_dir.hpp"

using kcoral::test::Json;
using kcoral::test::ServerFixture;

namespace {

// The lines of a file, split on '\n' alone (as a byte-oriented reader would).
std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(file, line, '\n');) lines.push_back(line);
  return lines;
}

std::unique_ptr<kcoral::EventLog> open_log(kcoral::EventLog::Settings settings) {
  auto log = kcoral::EventLog::open(std::move(settings));
  REQUIRE_MESSAGE(log.has_value(), log.error().message);
  return std::move(*log);
}

std::vector<std::string> names_in(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// A record of the given status; the rest is left as a refusal's would be.
kcoral::ExecuteRecord record_of(std::string_view request_id, int http_status, kcoral::ResponseStatus status) {
  kcoral::ExecuteRecord record{};
  record.request_id = request_id;
  record.client = "127.0.0.1:4321";
  record.http_status = http_status;
  record.status = status;
  return record;
}

kcoral::ExecuteRecord unauthorized() {
  kcoral::ExecuteRecord record = record_of("refused", 401, kcoral::ResponseStatus::error);
  record.error_kind = kcoral::ErrorKind::unauthorized;
  record.error_message = "this server needs a bearer token";
  record.tenant = std::nullopt;
  return record;
}

}  // namespace

TEST_SUITE("event_log") {

TEST_CASE("past its size the file moves to .1, older ones up, and only its count of files is kept") {
  kcoral::test::TempDir dir;
  auto log = open_log({dir.path(), 100, 3});
  for (int i = 0; i < 35; ++i) log->write(R"({"n":)" + std::to_string(100 + i) + "}");  // 10 bytes each
  CHECK(names_in(dir.path()) == std::vector<std::string>{"events.jsonl", "events.jsonl.1", "events.jsonl.2"});
  for (const std::string& name : names_in(dir.path())) CHECK(std::filesystem::file_size(dir / name) <= 100);
  auto current = lines_of(dir / "events.jsonl");
  REQUIRE_FALSE(current.empty());
  CHECK(current.back() == R"({"n":134})");
  CHECK(lines_of(dir / "events.jsonl.2").front() == R"({"n":110})");  // 100 to 109 went
}

TEST_CASE("a log of another name in the same directory rotates on its own") {
  kcoral::test::TempDir dir;
  auto events = open_log({dir.path(), 200, 2});
  auto anonymous = open_log({dir.path(), 200, 2, "anonymous.jsonl"});
  CHECK(anonymous->path() == dir / "anonymous.jsonl");
  events->write(R"({"kept":true})");
  for (int i = 0; i < 100; ++i) anonymous->write(R"({"refused":true})");
  CHECK(names_in(dir.path()) == std::vector<std::string>{"anonymous.jsonl", "anonymous.jsonl.1", "events.jsonl"});
  CHECK(lines_of(dir / "events.jsonl") == std::vector<std::string>{R"({"kept":true})"});
}

TEST_CASE("with tokens, records that showed none go to anonymous.jsonl and cannot rotate events.jsonl") {
  kcoral::test::TempDir dir;
  ServerFixture server(*kcoral::Tenants::parse("secret\n", "tokens"));
  auto events = open_log({dir.path(), 2000, 2});
  auto anonymous = open_log({dir.path(), 2000, 2, "anonymous.jsonl"});
  server.state.event_log = events.get();
  server.state.anonymous_log = anonymous.get();
  kcoral::record_execute(server.state, record_of("a-client", 200, kcoral::ResponseStatus::completed));
  for (int i = 0; i < 800; ++i) kcoral::record_execute(server.state, unauthorized());
  auto kept = lines_of(dir / "events.jsonl");
  REQUIRE(kept.size() == 1);
  CHECK(Json::parse(kept[0])["request_id"] == "a-client");
  CHECK_FALSE(std::filesystem::exists(dir / "events.jsonl.1"));
  auto refused = lines_of(dir / "anonymous.jsonl");
  REQUIRE_FALSE(refused.empty());
  CHECK(Json::parse(refused.back())["outcome"] == "unauthorized");
  CHECK(std::filesystem::exists(dir / "anonymous.jsonl.1"));
  CHECK_FALSE(std::filesystem::exists(dir / "anonymous.jsonl.2"));
  CHECK(server.metrics.render({}, server.blobs).find(
            "kcoral_execute_requests_total{outcome=\"unauthorized\"} 800") != std::string::npos);

  // Without an anonymous log such a record is counted but written nowhere.
  server.state.anonymous_log = nullptr;
  kcoral::record_execute(server.state, unauthorized());
  CHECK(lines_of(dir / "events.jsonl").size() == 1);
}

TEST_CASE("line separators and every other non-ASCII character are escaped; invalid UTF-8 is replaced") {
  kcoral::test::TempDir dir;
  ServerFixture server;
  auto events = open_log({dir.path(), 1 << 20, 2});
  server.state.event_log = events.get();
  std::string message = "a\u2028b\u2029c\u0085d \u00e9 \xff!";
  kcoral::ExecuteRecord failed = record_of("r", 200, kcoral::ResponseStatus::failed);
  failed.error_kind = kcoral::ErrorKind::runtime;
  failed.error_message = message;
  kcoral::record_execute(server.state, failed);
  std::ifstream file(dir / "events.jsonl", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  REQUIRE_FALSE(text.empty());
  CHECK(text.back() == '\n');
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  CHECK(std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  CHECK(text.find("\\u2028") != std::string::npos);
  CHECK(text.find("\\u2029") != std::string::npos);
  CHECK(text.find("\\u0085") != std::string::npos);
  Json line = Json::parse(text);
  CHECK(line["error"]["message"] == "a\u2028b\u2029c\u0085d \u00e9 \ufffd!");
}

TEST_CASE("a worker's retirement reason is one line of ASCII, cut at 300 bytes; none is no field") {
  kcoral::test::TempDir dir;
  ServerFixture server;
  auto events = open_log({dir.path(), 1 << 20, 2});
  server.state.event_log = events.get();
  // The worker wrote it: a megabyte of line breaks, separators and invalid UTF-8.
  std::string reason;
  while (reason.size() < (1u << 20)) reason += "\n\u2028\xff\r";
  kcoral::ExecuteRecord retired = record_of("retired", 200, kcoral::ResponseStatus::completed);
  retired.worker_retired = reason;
  kcoral::record_execute(server.state, retired);
  kcoral::record_execute(server.state, record_of("kept", 200, kcoral::ResponseStatus::completed));
  auto lines = lines_of(dir / "events.jsonl");
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].size() < 4000);
  CHECK(std::all_of(lines[0].begin(), lines[0].end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  Json first = Json::parse(lines[0]);
  CHECK(first["worker_retired"].get<std::string>().starts_with("\n\u2028"));
  CHECK_FALSE(Json::parse(lines[1]).contains("worker_retired"));
}

TEST_CASE("a line names its tenant by the operator's name, never its token; an anonymous one by none") {
  kcoral::test::TempDir dir;
  ServerFixture server(*kcoral::Tenants::parse("alice token-of-alice\nbob token-of-bob\n", "tokens"));
  auto events = open_log({dir.path(), 1 << 20, 2});
  auto anonymous = open_log({dir.path(), 1 << 20, 2, "anonymous.jsonl"});
  server.state.event_log = events.get();
  server.state.anonymous_log = anonymous.get();
  kcoral::ExecuteRecord bobs = record_of("bob's", 200, kcoral::ResponseStatus::completed);
  bobs.tenant = 1;
  kcoral::record_execute(server.state, bobs);
  kcoral::record_execute(server.state, unauthorized());
  auto kept = lines_of(dir / "events.jsonl");
  REQUIRE(kept.size() == 1);
  CHECK(Json::parse(kept[0])["tenant"] == "bob");
  auto refused = lines_of(dir / "anonymous.jsonl");
  REQUIRE(refused.size() == 1);
  CHECK(Json::parse(refused[0])["tenant"].is_null());
  for (const std::string& line : {kept[0], refused[0]}) CHECK(line.find("token-of") == std::string::npos);
  CHECK(server.metrics.render({}, server.blobs).find("token-of") == std::string::npos);
}

}  // TEST_SUITE
