// FuzzedResults: the `results_json` of a ProgramResult and its binary parts, made from fuzz
// bytes: a typed tree of docs/protocol.md ("Values") with every kind of node,
// and binary nodes numbered `return:0`, `return:1`, ... depth-first, as the executor
// writes them. Strings may hold any bytes: they are written as Python's encoder would,
// valid JSON, with what is not UTF-8 replaced.
//
//   FuzzedDataProvider in(data, size);
//   kcoral::fuzz::FuzzedResults results(in);
//   use(results.json(), results.parts());
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kcoral/sha256.hpp"

namespace kcoral::fuzz {

class FuzzedResults {
 public:
  explicit FuzzedResults(FuzzedDataProvider& in) : in_(in) {
    json_ = "{";
    std::size_t count = in_.ConsumeIntegralInRange<std::size_t>(0, 6);
    for (std::size_t i = 0; i < count; ++i) {
      if (i > 0) json_ += ',';
      json_ += text(in_.ConsumeRandomLengthString(16)) + ':' + value(0);
    }
    json_ += '}';
  }

  [[nodiscard]] const std::string& json() const { return json_; }
  [[nodiscard]] const std::vector<std::string>& parts() const { return parts_; }

 private:
  static constexpr std::size_t kMaxDepth = 4;
  static constexpr std::size_t kMaxParts = 16;

  static std::string text(const std::string& value) {
    return nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  // A binary node's "part" and "sha256" fields, for a new part.
  std::string part_fields() {
    std::string data = in_.ConsumeRandomLengthString(256);
    std::string fields = R"("part":"return:)" + std::to_string(parts_.size()) + R"(","sha256":")" +
                         sha256_hex(data) + '"';
    parts_.push_back(std::move(data));
    return fields;
  }

  std::string file_node() {
    std::size_t size = in_.ConsumeIntegralInRange<std::size_t>(0, 1 << 20);
    return R"({"type":"file","size":)" + std::to_string(size) + ',' + part_fields() + '}';
  }

  std::string integer() {
    if (in_.ConsumeBool()) return std::to_string(in_.ConsumeIntegral<std::int64_t>());
    // Wider than 64 bits, as Python's int may be (but within a double's range, as the
    // client's JSON parser needs).
    std::string digits = in_.ConsumeBool() ? "-" : "";
    digits += static_cast<char>('1' + in_.ConsumeIntegralInRange(0, 8));
    std::size_t more = in_.ConsumeIntegralInRange<std::size_t>(19, 40);
    for (std::size_t i = 0; i < more; ++i) digits += static_cast<char>('0' + in_.ConsumeIntegralInRange(0, 9));
    return digits;
  }

  std::string value(std::size_t depth) {
    static constexpr std::array<const char*, 12> kDtypes{"bool", "uint8", "int8", "float8_e4m3fn",
                                                         "float8_e5m2", "int16", "float16", "bfloat16",
                                                         "int32", "float32", "int64", "float64"};
    bool binary_allowed = parts_.size() < kMaxParts;
    bool nesting_allowed = depth < kMaxDepth;
    switch (in_.ConsumeIntegralInRange(0, 10)) {
      case 1: return std::string(R"({"type":"boolean","value":)") + (in_.ConsumeBool() ? "true" : "false") + '}';
      case 2: return R"({"type":"integer","value":)" + integer() + '}';
      case 3: {
        double number = in_.ConsumeFloatingPoint<double>();
        if (!std::isfinite(number)) number = 0;  // non-finite floats fail with `serialization`
        return R"({"type":"number","value":)" + nlohmann::json(number).dump() + '}';
      }
      case 4: return R"({"type":"string","value":)" + text(in_.ConsumeRandomLengthString(64)) + '}';
      case 5:
      case 6: {
        if (!nesting_allowed) break;
        bool array = in_.ConsumeBool();
        std::string out = array ? R"({"type":"array","value":[)" : R"({"type":"object","value":{)";
        std::size_t count = in_.ConsumeIntegralInRange<std::size_t>(0, 4);
        for (std::size_t i = 0; i < count; ++i) {
          if (i > 0) out += ',';
          if (!array) out += text(in_.ConsumeRandomLengthString(16)) + ':';
          out += value(depth + 1);
        }
        return out + (array ? "]}" : "}}");
      }
      case 7:
        if (!binary_allowed) break;
        return R"({"type":"bytes",)" + part_fields() + '}';
      case 8: {
        if (!binary_allowed) break;
        std::string out = R"({"type":"tensor","dtype":")" +
                          std::string(kDtypes[in_.ConsumeIntegralInRange<std::size_t>(0, kDtypes.size() - 1)]) +
                          R"(","shape":[)";
        std::size_t rank = in_.ConsumeIntegralInRange<std::size_t>(0, 4);
        for (std::size_t i = 0; i < rank; ++i)
          out += (i > 0 ? "," : "") + std::to_string(in_.ConsumeIntegralInRange(0, 4096));
        return out + "]," + part_fields() + '}';
      }
      case 9:
        if (!binary_allowed) break;
        return file_node();
      case 10: {
        if (!binary_allowed) break;
        std::string out = R"({"type":"folder","files":{)";
        std::size_t files = in_.ConsumeIntegralInRange<std::size_t>(0, 3);
        for (std::size_t i = 0; i < files && parts_.size() < kMaxParts; ++i)
          out += (i > 0 ? "," : "") + text(in_.ConsumeRandomLengthString(32)) + ':' + file_node();
        out += R"(},"directories":[)";
        std::size_t directories = in_.ConsumeIntegralInRange<std::size_t>(0, 3);
        for (std::size_t i = 0; i < directories; ++i)
          out += (i > 0 ? "," : "") + text(in_.ConsumeRandomLengthString(32));
        return out + "]}";
      }
      default: break;
    }
    return R"({"type":"null"})";
  }

  FuzzedDataProvider& in_;
  std::string json_;
  std::vector<std::string> parts_;
};

}  // namespace kcoral::fuzz
