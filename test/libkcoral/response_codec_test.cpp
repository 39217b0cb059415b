// Responses (libkcoral/src/response_codec.cpp): COMPLETED/FAILED bodies as JSON (no binary
// parts) or multipart (`result` first, then `return:N`), their field names and order, the
// executor's results spliced in verbatim (integers wider than 64 bits survive), error
// objects (gpu_access adds its three fields), CACHE_MISS, and errors outside a program.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "kcoral/codec.hpp"

using Json = nlohmann::ordered_json;

namespace {

std::vector<std::string> keys_of(const Json& object) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.push_back(key);
  return keys;
}

kcoral::ProgramResult completed_result() {
  kcoral::ProgramResult result;
  result.results_json = R"({"n":{"type":"integer","value":42}})";
  result.stdout_output = {"out\n", false};
  result.stderr_output = {"err", true};
  return result;
}

}  // namespace

TEST_SUITE("response_codec") {

TEST_CASE("a completed program without binary parts is one JSON body with the fields in order") {
  auto response = kcoral::encode_program_response("rid", completed_result(), {1.5, 20.25, 0.5, 3});
  CHECK(response.http_status == 200);
  CHECK(response.content_type == "application/json");
  Json body = Json::parse(response.body.joined());
  CHECK(keys_of(body) == std::vector<std::string>{"status", "request_id", "queue_ms", "elapsed_ms", "lease_wait_ms",
                                                  "lease_held_ms", "results", "stdout", "stderr",
                                                  "stdout_truncated", "stderr_truncated"});
  CHECK(body["status"] == "COMPLETED");
  CHECK(body["request_id"] == "rid");
  CHECK(body["queue_ms"] == 1.5);
  CHECK(body["elapsed_ms"] == 20.25);
  CHECK(body["lease_wait_ms"] == 0.5);
  CHECK(body["lease_held_ms"] == 3.0);
  CHECK(body["results"] == Json::parse(R"({"n":{"type":"integer","value":42}})"));
  CHECK(body["stdout"] == "out\n");
  CHECK(body["stderr"] == "err");
  CHECK(body["stdout_truncated"] == false);
  CHECK(body["stderr_truncated"] == true);
}

TEST_CASE("the GPUs a program held follow the lease times as gpu_ids and gpu_count, and only when there are any") {
  const std::vector<int> gpus{3};
  Json body = Json::parse(kcoral::encode_program_response("rid", completed_result(), {1, 2, 0, 1}, gpus).body.joined());
  CHECK(keys_of(body) == std::vector<std::string>{"status", "request_id", "queue_ms", "elapsed_ms", "lease_wait_ms",
                                                  "lease_held_ms", "gpu_ids", "gpu_count", "results", "stdout",
                                                  "stderr", "stdout_truncated", "stderr_truncated"});
  CHECK(body["gpu_ids"] == Json::array({3}));
  CHECK(body["gpu_count"] == 1);
  Json cpu = Json::parse(kcoral::encode_program_response("rid", completed_result(), {1, 2, 0, 1}, {}).body.joined());
  CHECK_FALSE(cpu.contains("gpu_ids"));
  CHECK_FALSE(cpu.contains("gpu_count"));
}

TEST_CASE("results are spliced in verbatim, so integers wider than 64 bits survive") {
  kcoral::ProgramResult result;
  result.results_json = R"({"big":{"type":"integer","value":1180591620717411303424},"f":{"type":"number","value":0.1}})";
  auto response = kcoral::encode_program_response("r", kcoral::ProgramResult(result), {});
  CHECK(response.body.joined().find(R"("results":{"big":{"type":"integer","value":1180591620717411303424},)") !=
        std::string::npos);
  CHECK(Json::parse(response.body.joined()).is_object());
}

TEST_CASE("an empty result object is still an object") {
  kcoral::ProgramResult result;
  auto response = kcoral::encode_program_response("r", kcoral::ProgramResult(result), {});
  CHECK(Json::parse(response.body.joined())["results"] == Json::object());
}

TEST_CASE("binary parts make the response multipart: result first, then return:N in order") {
  kcoral::ProgramResult result = completed_result();
  for (std::string_view data : {std::string_view("first"), std::string_view("\0\r\n--", 5), std::string_view("")}) {
    auto blob = kcoral::Blob::copy_of(data);
    REQUIRE(blob.has_value());
    result.parts.push_back(*blob);
  }
  auto response = kcoral::encode_program_response("rid", kcoral::ProgramResult(result), {});
  CHECK(response.http_status == 200);
  REQUIRE(response.content_type.rfind("multipart/form-data; boundary=", 0) == 0);
  const std::string body_text = response.body.joined();  // the parts below are views of it
  auto parts = kcoral::parse_multipart(response.content_type, body_text, {});
  REQUIRE_MESSAGE(parts.has_value(), parts.error().message);
  REQUIRE(parts->size() == 4);
  CHECK((*parts)[0].name == "result");
  CHECK((*parts)[0].content_type == "application/json");
  Json body = Json::parse((*parts)[0].data);
  CHECK(body["status"] == "COMPLETED");
  CHECK(body["results"]["n"]["value"] == 42);
  const char* names[] = {"return:0", "return:1", "return:2"};
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK((*parts)[i + 1].name == names[i]);
    CHECK((*parts)[i + 1].content_type == "application/octet-stream");
    CHECK((*parts)[i + 1].data == result.parts[i].view());
  }
}

TEST_CASE("megabyte parts go out from their blobs, uncopied, and the body they make parses back whole") {
  kcoral::ProgramResult result = completed_result();
  std::string first(std::size_t{3} << 20, 'a'), second((std::size_t{2} << 20) + 1, '\0');
  for (std::size_t i = 0; i < second.size(); ++i) second[i] = static_cast<char>(i * 131 % 251);
  for (const std::string& data : {first, second}) {
    auto blob = kcoral::Blob::copy_of(data);
    REQUIRE(blob.has_value());
    result.parts.push_back(*blob);
  }
  auto response = kcoral::encode_program_response("rid", kcoral::ProgramResult(result), {});
  // The pieces: text, blob, text, blob, text; each blob piece the part's own memory.
  const auto& pieces = response.body.pieces();
  REQUIRE(pieces.size() == 5);
  CHECK(std::get<kcoral::Blob>(pieces[1]).view().data() == result.parts[0].view().data());
  CHECK(std::get<kcoral::Blob>(pieces[3]).view().data() == result.parts[1].view().data());
  const std::string body_text = response.body.joined();
  CHECK(body_text.size() == response.body.size());
  auto parts = kcoral::parse_multipart(response.content_type, body_text, {});
  REQUIRE_MESSAGE(parts.has_value(), parts.error().message);
  REQUIRE(parts->size() == 3);
  CHECK((*parts)[1].data == first);
  CHECK((*parts)[2].data == second);
}

TEST_CASE("a failed program adds the error object last, with every protocol field") {
  kcoral::ProgramResult result = completed_result();
  result.error = kcoral::InstructionError{kcoral::ErrorKind::correctness, "AssertionError: no", 3, "run",
                                          "check", "Traceback ...", std::nullopt};
  auto response = kcoral::encode_program_response("rid", kcoral::ProgramResult(result), {});
  CHECK(response.http_status == 200);
  Json body = Json::parse(response.body.joined());
  CHECK(body["status"] == "FAILED");
  CHECK(keys_of(body).back() == "error");
  CHECK(body["results"]["n"]["value"] == 42);  // earlier returns are kept
  const Json& error = body["error"];
  CHECK(keys_of(error) == std::vector<std::string>{"kind", "message", "instruction_index", "instruction_op",
                                                   "instruction_id", "traceback"});
  CHECK(error["kind"] == "correctness");
  CHECK(error["message"] == "AssertionError: no");
  CHECK(error["instruction_index"] == 3);
  CHECK(error["instruction_op"] == "run");
  CHECK(error["instruction_id"] == "check");
  CHECK(error["traceback"] == "Traceback ...");
}

TEST_CASE("an instruction without an id reports instruction_id null") {
  kcoral::ProgramResult result;
  result.error = kcoral::InstructionError{kcoral::ErrorKind::serialization, "m", 0, "return", std::nullopt, "", {}};
  Json error = Json::parse(kcoral::encode_program_response("r", kcoral::ProgramResult(result), {}).body.joined())["error"];
  CHECK(error.contains("instruction_id"));
  CHECK(error["instruction_id"].is_null());
}

TEST_CASE("a gpu_access error adds cuda_call, location and interfered_request_id") {
  kcoral::ProgramResult result;
  result.error = kcoral::InstructionError{
      kcoral::ErrorKind::gpu_access, "CUDA call in a cpu_only function", 2, "run", "r", "",
      kcoral::GpuAccessDetail{"cudaMalloc", "kernel.py:12", std::string("other-request")}};
  Json error = Json::parse(kcoral::encode_program_response("r", kcoral::ProgramResult(result), {}).body.joined())["error"];
  CHECK(error["kind"] == "gpu_access");
  CHECK(error["cuda_call"] == "cudaMalloc");
  CHECK(error["location"] == "kernel.py:12");
  CHECK(error["interfered_request_id"] == "other-request");

  result.error->gpu_access = std::nullopt;
  Json bare = Json::parse(kcoral::encode_program_response("r", kcoral::ProgramResult(result), {}).body.joined())["error"];
  CHECK(bare["cuda_call"] == "");
  CHECK(bare["location"] == "");
  CHECK(bare["interfered_request_id"].is_null());
}

TEST_CASE("other error kinds carry no gpu_access fields") {
  for (kcoral::ErrorKind kind : kcoral::kAllErrorKinds) {
    if (!kcoral::is_program_kind(kind) || kind == kcoral::ErrorKind::gpu_access) continue;
    CAPTURE(kcoral::to_wire(kind));
    kcoral::ProgramResult result;
    result.error = kcoral::InstructionError{kind, "m", 0, "upload", "x", "", kcoral::GpuAccessDetail{"a", "b", {}}};
    Json error = Json::parse(kcoral::encode_program_response("r", kcoral::ProgramResult(result), {}).body.joined())["error"];
    CHECK(error["kind"] == std::string(kcoral::to_wire(kind)));
    CHECK_FALSE(error.contains("cuda_call"));
    CHECK_FALSE(error.contains("interfered_request_id"));
  }
}

TEST_CASE("captured output that is not UTF-8 is replaced, not thrown on") {
  kcoral::ProgramResult result;
  result.stdout_output = {"ok \xff\xfe end", false};
  result.error = kcoral::InstructionError{kcoral::ErrorKind::runtime, "bad \xc0", 0, "run", "r", "tb \xed\xa0\x80", {}};
  kcoral::EncodedResponse response;
  CHECK_NOTHROW(response = kcoral::encode_program_response("r", kcoral::ProgramResult(result), {}));
  Json body = Json::parse(response.body.joined());
  std::string out = body["stdout"];
  CHECK(out.rfind("ok ", 0) == 0);
  CHECK(out.find("\xef\xbf\xbd") != std::string::npos);  // U+FFFD
  CHECK(out.find(" end") != std::string::npos);
}

TEST_CASE("a response status's wire word is the protocol's") {
  CHECK(kcoral::to_wire(kcoral::ResponseStatus::completed) == "COMPLETED");
  CHECK(kcoral::to_wire(kcoral::ResponseStatus::failed) == "FAILED");
  CHECK(kcoral::to_wire(kcoral::ResponseStatus::cache_miss) == "CACHE_MISS");
  CHECK(kcoral::to_wire(kcoral::ResponseStatus::error) == "ERROR");
}

TEST_CASE("a cache miss lists the missing digests in order") {
  auto response = kcoral::encode_cache_miss("rid", {"bbbb", "aaaa"});
  CHECK(response.http_status == 200);
  CHECK(response.content_type == "application/json");
  Json body = Json::parse(response.body.joined());
  CHECK(keys_of(body) == std::vector<std::string>{"status", "request_id", "missing_blobs"});
  CHECK(body["status"] == "CACHE_MISS");
  CHECK(body["request_id"] == "rid");
  CHECK(body["missing_blobs"] == Json::array({"bbbb", "aaaa"}));
}

TEST_CASE("an error outside a program has its kind's status and an ERROR body") {
  for (kcoral::ErrorKind kind : kcoral::kAllErrorKinds) {
    CAPTURE(kcoral::to_wire(kind));
    auto response = kcoral::encode_error("rid", {kind, "because \"quoted\""});
    CHECK(response.http_status == kcoral::http_status(kind));
    CHECK(response.content_type == "application/json");
    Json body = Json::parse(response.body.joined());
    CHECK(keys_of(body) == std::vector<std::string>{"status", "request_id", "error"});
    CHECK(body["status"] == "ERROR");
    CHECK(body["request_id"] == "rid");
    CHECK(body["error"] == Json{{"kind", std::string(kcoral::to_wire(kind))}, {"message", "because \"quoted\""}});
  }
  CHECK(kcoral::encode_error("r", {kcoral::ErrorKind::parse, ""}).http_status == 400);
  CHECK(kcoral::encode_error("r", {kcoral::ErrorKind::request_too_large, ""}).http_status == 413);
  CHECK(kcoral::encode_error("r", {kcoral::ErrorKind::busy, ""}).http_status == 503);
  CHECK(kcoral::encode_error("r", {kcoral::ErrorKind::timeout, ""}).http_status == 504);
  CHECK(kcoral::encode_error("r", {kcoral::ErrorKind::response_too_large, ""}).http_status == 500);
}

}  // TEST_SUITE
