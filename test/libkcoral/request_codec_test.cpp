// Requests (libkcoral/src/request_codec.cpp): a multipart body to a validated Program and
// verified blobs. Exactly one application/json `program` part; `blob:<sha256>` parts that
// are application/octet-stream, unique, hash to their name and are referenced by the
// program; fewer blobs than referenced is fine (the cache may have them).
#include <doctest/doctest.h>

#include "kcoral/codec.hpp"
#include "kcoral/sha256.hpp"

using kcoral::parse_execute_request;

namespace {

struct Body {
  std::vector<std::tuple<std::string, std::string, std::string>> parts;  // name, type, data
  Body& add(std::string name, std::string type, std::string data) {
    parts.emplace_back(std::move(name), std::move(type), std::move(data));
    return *this;
  }
  Body& program(const std::string& json) { return add("program", "application/json", json); }
  Body& blob(const std::string& data) { return add("blob:" + kcoral::sha256_hex(data), "application/octet-stream", data); }
  kcoral::EncodedMultipart encode() const {
    std::vector<kcoral::OutgoingPart> out;
    for (const auto& [name, type, data] : parts) out.push_back({name, type, data});
    return kcoral::encode_multipart(out);
  }
};

// A program that uploads `data` as bytes under id `id`.
std::string bytes_program(const std::vector<std::string>& datas) {
  std::string instructions;
  for (std::size_t i = 0; i < datas.size(); ++i) {
    if (i > 0) instructions += ",";
    instructions += R"({"op":"upload","id":"b)" + std::to_string(i) + R"(","kind":"bytes","blob":")" +
                    kcoral::sha256_hex(datas[i]) + "\"}";
  }
  return R"({"instructions":[)" + instructions + "]}";
}

kcoral::Error failure(const Body& body, const kcoral::RequestLimits& limits = {}) {
  auto encoded = body.encode();
  auto request = parse_execute_request(encoded.content_type, encoded.body, limits);
  REQUIRE_FALSE(request.has_value());
  CHECK(request.error().kind == kcoral::ErrorKind::parse);
  return request.error();
}

}  // namespace

TEST_SUITE("request_codec") {

TEST_CASE("a request yields its program, the program text as sent and the verified blobs") {
  const std::string program = bytes_program({"one", "two", "three"});
  Body body;
  body.blob("two").program(program).blob("one");
  auto encoded = body.encode();
  auto request = parse_execute_request(encoded.content_type, encoded.body, {});
  REQUIRE_MESSAGE(request.has_value(), request.error().message);
  CHECK(request->program_json == program);
  CHECK(request->program.instructions().size() == 3);
  REQUIRE(request->blobs.size() == 2);
  CHECK(request->blobs.at(kcoral::sha256_hex("one")).view() == "one");
  CHECK(request->blobs.at(kcoral::sha256_hex("two")).view() == "two");
  CHECK_FALSE(request->blobs.contains(kcoral::sha256_hex("three")));
}

TEST_CASE("the parse budget is asked for the parse's bound before the parse, then told what the program keeps") {
  const std::string program = R"({"instructions":[{"op":"upload","id":"m","kind":"module","source":"def f(*a): pass"},)"
                              R"({"op":"get_function","id":"f","module":{"$ref":"m"},"name":"f"},)"
                              R"({"op":"run","id":"r","fn":{"$ref":"f"},"args":[0,1,2,[3,4],"five"]}]})";
  auto encoded = Body().program(program).encode();
  std::uint64_t asked = 0, asked_program = 0, kept = 0;
  kcoral::ParseBudget budget{[&](std::uint64_t bytes, std::uint64_t program_bytes) -> kcoral::Status {
                               asked = bytes;
                               asked_program = program_bytes;
                               return {};
                             },
                             [&](std::uint64_t bytes) { kept = bytes; }};
  auto request = parse_execute_request(encoded.content_type, encoded.body, {}, budget);
  REQUIRE_MESSAGE(request.has_value(), request.error().message);
  CHECK(asked_program == kcoral::Program::parse_memory_bound(program));
  CHECK(asked > asked_program);  // and its parts' records, the parser's buffers
  CHECK(kept == request->program.memory_bytes() + program.size());

  kcoral::ParseBudget refusing{[](std::uint64_t, std::uint64_t) -> kcoral::Status {
                                 return kcoral::fail(kcoral::ErrorKind::request_too_large, "no room");
                               },
                               [](std::uint64_t) { FAIL("nothing was held"); }};
  auto refused = parse_execute_request(encoded.content_type, encoded.body, {}, refusing);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().kind == kcoral::ErrorKind::request_too_large);
}

TEST_CASE("the program part keeps its exact bytes, whitespace included") {
  const std::string program = "  {\"instructions\" : [ {\"op\":\"upload\",\"id\":\"m\",\"kind\":\"module\",\"source\":\"\"} ] }\n";
  auto encoded = Body{}.program(program).encode();
  auto request = parse_execute_request(encoded.content_type, encoded.body, {});
  REQUIRE(request.has_value());
  CHECK(request->program_json == program);
  CHECK(request->blobs.empty());
}

TEST_CASE("an empty blob is a blob") {
  auto encoded = Body{}.program(bytes_program({""})).blob("").encode();
  auto request = parse_execute_request(encoded.content_type, encoded.body, {});
  REQUIRE_MESSAGE(request.has_value(), request.error().message);
  CHECK(request->blobs.at(kcoral::sha256_hex("")).size() == 0);
}

TEST_CASE("the program part is required, once, as application/json") {
  CHECK(failure(Body{}.blob("x")).message.find("no 'program'") != std::string::npos);
  CHECK(failure(Body{}.program(bytes_program({"x"})).program(bytes_program({"x"}))).message.find("two") !=
        std::string::npos);
  failure(Body{}.add("program", "text/plain", bytes_program({"x"})));
  failure(Body{}.add("program", "application/octet-stream", bytes_program({"x"})));
  auto encoded = Body{}.add("program", "Application/JSON; charset=utf-8", bytes_program({"x"})).encode();
  CHECK(parse_execute_request(encoded.content_type, encoded.body, {}).has_value());
}

TEST_CASE("parts other than program and blob:<sha256> are rejected") {
  const std::string program = bytes_program({"x"});
  const std::string digest = kcoral::sha256_hex("x");
  failure(Body{}.program(program).add("options", "application/json", "{}"));
  failure(Body{}.program(program).add("blob", "application/octet-stream", "x"));
  failure(Body{}.program(program).add("blob:", "application/octet-stream", "x"));
  failure(Body{}.program(program).add("blobs:" + digest, "application/octet-stream", "x"));
  failure(Body{}.program(program).add("Blob:" + digest, "application/octet-stream", "x"));
}

TEST_CASE("malformed blob part names are rejected") {
  std::string digest = kcoral::sha256_hex("x");
  std::string upper = digest;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::string program = bytes_program({"x"});
  for (const std::string& name : {upper, digest.substr(1), digest + "0", digest.substr(0, 63) + "g", " " + digest.substr(1)}) {
    CAPTURE(name);
    CHECK(failure(Body{}.program(program).add("blob:" + name, "application/octet-stream", "x"))
              .message.find("malformed blob part name") != std::string::npos);
  }
}

TEST_CASE("a duplicate blob part is rejected even with identical bytes") {
  CHECK(failure(Body{}.program(bytes_program({"x"})).blob("x").blob("x")).message.find("two parts") !=
        std::string::npos);
}

TEST_CASE("a blob part must be application/octet-stream") {
  const std::string name = "blob:" + kcoral::sha256_hex("x");
  failure(Body{}.program(bytes_program({"x"})).add(name, "text/plain", "x"));
  failure(Body{}.program(bytes_program({"x"})).add(name, "application/json", "x"));
  auto encoded = Body{}.program(bytes_program({"x"})).add(name, "Application/Octet-Stream", "x").encode();
  CHECK(parse_execute_request(encoded.content_type, encoded.body, {}).has_value());
}

TEST_CASE("a blob whose bytes do not hash to its name is rejected") {
  const std::string name = "blob:" + kcoral::sha256_hex("x");
  auto error = failure(Body{}.program(bytes_program({"x"})).add(name, "application/octet-stream", "y"));
  CHECK(error.message.find("does not match") != std::string::npos);
  failure(Body{}.program(bytes_program({"x"})).add(name, "application/octet-stream", "x\n"));
  failure(Body{}.program(bytes_program({"x"})).add(name, "application/octet-stream", ""));
}

TEST_CASE("megabyte blobs, hashed beside their copy, are verified as small ones are") {
  std::string first(3 << 20, 'a'), second((1 << 20) + 7, 'b');
  Body good;
  good.program(bytes_program({first, second})).blob(first).blob(second);
  auto encoded = good.encode();
  auto request = parse_execute_request(encoded.content_type, encoded.body, {});
  REQUIRE_MESSAGE(request.has_value(), request.error().message);
  CHECK(request->blobs.at(kcoral::sha256_hex(first)).view() == first);
  CHECK(request->blobs.at(kcoral::sha256_hex(second)).view() == second);
  // The second one's last byte changed: refused, named by the digest it claimed.
  std::string altered = second;
  altered.back() = 'c';
  auto error = failure(Body{}
                           .program(bytes_program({first, second}))
                           .blob(first)
                           .add("blob:" + kcoral::sha256_hex(second), "application/octet-stream", altered));
  CHECK(error.message.find("blob part " + kcoral::sha256_hex(second) + " does not match its content") !=
        std::string::npos);
}

TEST_CASE("a blob no instruction references is rejected") {
  auto error = failure(Body{}.program(bytes_program({"x"})).blob("x").blob("unused"));
  CHECK(error.message.find("not referenced") != std::string::npos);
}

TEST_CASE("a program that does not parse fails the request with its parse error") {
  auto error = failure(Body{}.program(R"({"instructions":[]})"));
  CHECK(error.message.find("non-empty") != std::string::npos);
  failure(Body{}.program("{\"instructions\":[{\"op\":\"upload\",\"id\":\"m\",\"kind\":\"module\",\"source\":NaN}]}"));
}

TEST_CASE("malformed multipart framing fails the request with parse") {
  auto request = parse_execute_request("application/json", R"({"instructions":[]})", {});
  REQUIRE_FALSE(request.has_value());
  CHECK(request.error().kind == kcoral::ErrorKind::parse);
  auto encoded = Body{}.program(bytes_program({"x"})).encode();
  CHECK_FALSE(parse_execute_request(encoded.content_type, encoded.body + "garbage", {}).has_value());
  CHECK_FALSE(parse_execute_request(encoded.content_type, encoded.body.substr(0, encoded.body.size() - 8), {})
                  .has_value());
}

TEST_CASE("request limits reach the multipart and program parsers") {
  kcoral::RequestLimits limits;
  limits.multipart.max_parts = 2;
  failure(Body{}.program(bytes_program({"x", "y"})).blob("x").blob("y"), limits);
  kcoral::RequestLimits program_limits;
  program_limits.program.max_instructions = 1;
  failure(Body{}.program(bytes_program({"x", "y"})), program_limits);
}

}  // TEST_SUITE
