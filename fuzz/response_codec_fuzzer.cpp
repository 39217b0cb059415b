// Fuzz target: the response codec (libkcoral/src/response_codec.cpp): encode_program_response,
// encode_cache_miss and encode_error, driven by values made from the fuzz bytes.
//
// A FuzzedDataProvider picks the encoder and fills its arguments: request ids, captured
// output, error messages and digests of any bytes (not UTF-8 too), any error kind, finite
// timings, and results with every kind of typed node and their binary parts (fuzzed_results.hpp).
// The response must then read back: the JSON parses strictly (UTF-8 included), with the
// protocol's fields in order and the values sent, text compared where it was UTF-8, the
// results spliced in verbatim; a multipart response parses with parse_multipart into
// `result` then `return:N` holding the parts' bytes. Anything else aborts. Sizes are kept
// small: checking is most of the cost of a run.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <simdjson.h>
#include <string>
#include <vector>

#include "fuzzed_results.hpp"
#include "invariant.hpp"
#include "kcoral/codec.hpp"

namespace {

using Json = nlohmann::ordered_json;

bool is_utf8(const std::string& text) { return simdjson::validate_utf8(text.data(), text.size()); }

// A string the codec wrote from `sent`: the same text, unless `sent` was not UTF-8.
void check_text(const Json& value, const std::string& sent) {
  KCORAL_INVARIANT(value.is_string());
  if (is_utf8(sent)) KCORAL_INVARIANT(value.get_ref<const std::string&>() == sent);
}

void check_optional_text(const Json& value, const std::optional<std::string>& sent) {
  if (sent) check_text(value, *sent);
  else KCORAL_INVARIANT(value.is_null());
}

std::vector<std::string> keys_of(const Json& object) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.push_back(key);
  return keys;
}

Json parsed(std::string_view text) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  KCORAL_INVARIANT(!json.is_discarded() && json.is_object());
  return json;
}

double finite(FuzzedDataProvider& in) {
  double value = in.ConsumeFloatingPoint<double>();
  return std::isfinite(value) ? value : 0;
}

kcoral::ErrorKind any_kind(FuzzedDataProvider& in) {
  return kcoral::kAllErrorKinds[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kcoral::kAllErrorKinds) - 1)];
}

std::optional<std::string> maybe_text(FuzzedDataProvider& in, std::size_t max_length) {
  if (!in.ConsumeBool()) return std::nullopt;
  return in.ConsumeRandomLengthString(max_length);
}

kcoral::InstructionError instruction_error(FuzzedDataProvider& in) {
  kcoral::InstructionError error;
  error.kind = any_kind(in);
  error.message = in.ConsumeRandomLengthString(128);
  error.instruction_index = in.ConsumeIntegral<std::size_t>();
  error.instruction_op = in.ConsumeRandomLengthString(16);
  error.instruction_id = maybe_text(in, 64);
  error.traceback = in.ConsumeRandomLengthString(256);
  if (in.ConsumeBool())
    error.gpu_access = kcoral::GpuAccessDetail{in.ConsumeRandomLengthString(64), in.ConsumeRandomLengthString(64),
                                               maybe_text(in, 64)};
  return error;
}

void check_error_object(const Json& json, const kcoral::InstructionError& error) {
  KCORAL_INVARIANT(json.is_object());
  std::vector<std::string> keys{"kind", "message", "instruction_index", "instruction_op", "instruction_id",
                                "traceback"};
  bool gpu_access = error.kind == kcoral::ErrorKind::gpu_access;
  if (gpu_access) keys.insert(keys.end(), {"cuda_call", "location", "interfered_request_id"});
  KCORAL_INVARIANT(keys_of(json) == keys);
  KCORAL_INVARIANT(json["kind"] == kcoral::to_wire(error.kind));
  check_text(json["message"], error.message);
  KCORAL_INVARIANT(json["instruction_index"].is_number_unsigned());
  KCORAL_INVARIANT(json["instruction_index"].get<std::uint64_t>() == error.instruction_index);
  check_text(json["instruction_op"], error.instruction_op);
  check_optional_text(json["instruction_id"], error.instruction_id);
  check_text(json["traceback"], error.traceback);
  if (!gpu_access) return;
  const kcoral::GpuAccessDetail detail = error.gpu_access.value_or(kcoral::GpuAccessDetail{});
  check_text(json["cuda_call"], detail.cuda_call);
  check_text(json["location"], detail.location);
  check_optional_text(json["interfered_request_id"], detail.interfered_request_id);
}

void fuzz_program_response(FuzzedDataProvider& in) {
  std::string request_id = in.ConsumeRandomLengthString(64);
  kcoral::ResponseTimings timings{finite(in), finite(in), finite(in), finite(in)};
  kcoral::ProgramResult result;
  result.stdout_output = {in.ConsumeRandomLengthString(256), in.ConsumeBool()};
  result.stderr_output = {in.ConsumeRandomLengthString(256), in.ConsumeBool()};
  if (in.ConsumeBool()) result.error = instruction_error(in);
  kcoral::fuzz::FuzzedResults results(in);
  result.results_json = results.json();
  kcoral::BlobBuilder builder;
  for (const std::string& part : results.parts()) KCORAL_INVARIANT(builder.append(part).has_value());
  auto blobs = builder.finish();
  KCORAL_INVARIANT(blobs.has_value());
  result.parts = std::move(*blobs);

  kcoral::EncodedResponse response = kcoral::encode_program_response(request_id, kcoral::ProgramResult(result), timings);
  KCORAL_INVARIANT(response.http_status == 200);
  const std::string joined = response.body.joined();
  KCORAL_INVARIANT(joined.size() == response.body.size());
  std::string_view json_text = joined;
  if (results.parts().empty()) {
    KCORAL_INVARIANT(response.content_type == "application/json");
  } else {
    KCORAL_INVARIANT(response.content_type.starts_with("multipart/form-data; boundary="));
    auto parts = kcoral::parse_multipart(response.content_type, joined, {});
    KCORAL_INVARIANT(parts.has_value() && parts->size() == results.parts().size() + 1);
    KCORAL_INVARIANT((*parts)[0].name == "result" && (*parts)[0].content_type == "application/json");
    for (std::size_t i = 0; i < results.parts().size(); ++i) {
      const kcoral::MultipartPart& part = (*parts)[i + 1];
      KCORAL_INVARIANT(part.name == "return:" + std::to_string(i));
      KCORAL_INVARIANT(part.content_type == "application/octet-stream");
      KCORAL_INVARIANT(part.data == results.parts()[i]);
    }
    json_text = (*parts)[0].data;
  }

  Json body = parsed(json_text);
  std::vector<std::string> keys{"status",        "request_id", "queue_ms", "elapsed_ms",       "lease_wait_ms",
                                "lease_held_ms", "results",    "stdout",   "stderr",           "stdout_truncated",
                                "stderr_truncated"};
  if (result.error) keys.push_back("error");
  KCORAL_INVARIANT(keys_of(body) == keys);
  KCORAL_INVARIANT(body["status"] == (result.error ? "FAILED" : "COMPLETED"));
  check_text(body["request_id"], request_id);
  KCORAL_INVARIANT(body["queue_ms"].is_number() && body["queue_ms"].get<double>() == timings.queue_ms);
  KCORAL_INVARIANT(body["elapsed_ms"].is_number() && body["elapsed_ms"].get<double>() == timings.elapsed_ms);
  KCORAL_INVARIANT(body["lease_wait_ms"].is_number() && body["lease_wait_ms"].get<double>() == timings.lease_wait_ms);
  KCORAL_INVARIANT(body["lease_held_ms"].is_number() && body["lease_held_ms"].get<double>() == timings.lease_held_ms);
  // Spliced in verbatim (wide integers must survive), and the whole still parses.
  KCORAL_INVARIANT(json_text.find(",\"results\":" + results.json() + ",\"stdout\":") != std::string_view::npos);
  KCORAL_INVARIANT(body["results"].is_object());
  check_text(body["stdout"], result.stdout_output.text);
  check_text(body["stderr"], result.stderr_output.text);
  KCORAL_INVARIANT(body["stdout_truncated"] == result.stdout_output.truncated);
  KCORAL_INVARIANT(body["stderr_truncated"] == result.stderr_output.truncated);
  if (result.error) check_error_object(body["error"], *result.error);
}

void fuzz_cache_miss(FuzzedDataProvider& in) {
  std::string request_id = in.ConsumeRandomLengthString(64);
  std::vector<std::string> missing(in.ConsumeIntegralInRange<std::size_t>(0, 8));
  for (std::string& digest : missing) digest = in.ConsumeRandomLengthString(80);
  kcoral::EncodedResponse response = kcoral::encode_cache_miss(request_id, missing);
  KCORAL_INVARIANT(response.http_status == 200 && response.content_type == "application/json");
  Json body = parsed(response.body.joined());
  KCORAL_INVARIANT(keys_of(body) == (std::vector<std::string>{"status", "request_id", "missing_blobs"}));
  KCORAL_INVARIANT(body["status"] == "CACHE_MISS");
  check_text(body["request_id"], request_id);
  const Json& listed = body["missing_blobs"];
  KCORAL_INVARIANT(listed.is_array() && listed.size() == missing.size());
  for (std::size_t i = 0; i < missing.size(); ++i) check_text(listed[i], missing[i]);
}

void fuzz_error(FuzzedDataProvider& in) {
  std::string request_id = in.ConsumeRandomLengthString(64);
  kcoral::Error error{any_kind(in), in.ConsumeRandomLengthString(512)};
  kcoral::EncodedResponse response = kcoral::encode_error(request_id, error);
  KCORAL_INVARIANT(response.http_status == kcoral::http_status(error.kind));
  KCORAL_INVARIANT(response.content_type == "application/json");
  Json body = parsed(response.body.joined());
  KCORAL_INVARIANT(keys_of(body) == (std::vector<std::string>{"status", "request_id", "error"}));
  KCORAL_INVARIANT(body["status"] == "ERROR");
  check_text(body["request_id"], request_id);
  const Json& detail = body["error"];
  KCORAL_INVARIANT(detail.is_object() && keys_of(detail) == (std::vector<std::string>{"kind", "message"}));
  KCORAL_INVARIANT(detail["kind"] == kcoral::to_wire(error.kind));
  KCORAL_INVARIANT(kcoral::error_kind_from_wire(detail["kind"].get<std::string>()) == error.kind);
  check_text(detail["message"], error.message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: fuzz_cache_miss(in); break;
    case 1: fuzz_error(in); break;
    default: fuzz_program_response(in); break;
  }
  return 0;
}
