// Program::parse (libkcoral/src/program_parser.cpp), the JSON-level strictness and the
// bounds: duplicate keys at any depth, NaN/Infinity, trailing content, invalid UTF-8, the
// nesting bound, size/count/length limits, options, and tensor dtype/shape metadata
// including overflow of prod(shape) x itemsize.
#include <doctest/doctest.h>

#include <limits>

#include "libkcoral/test_support.hpp"

using kcoral::test::kFunction;
using kcoral::test::kModule;
using kcoral::test::parse_failure;
using kcoral::test::parses;
using kcoral::test::program_of;

namespace {

// A run of `f` whose args are `args` (a JSON array text).
std::string run_with_args(const std::string& args) {
  return program_of(std::string(kModule) + "," + std::string(kFunction) +
                    R"(,{"op":"run","id":"r","fn":{"$ref":"f"},"args":)" + args + "}");
}

std::string tensor(const std::string& dtype, const std::string& shape) {
  return program_of(R"({"op":"upload","id":"t","kind":"tensor","blob":"$A","dtype":)" + dtype +
                    R"(,"shape":)" + shape + "}");
}

}  // namespace

TEST_SUITE("program_parser") {

TEST_CASE("duplicate keys are rejected at every depth") {
  auto top = parse_failure(R"({"instructions":[)" + std::string(kModule) + R"(],"instructions":[]})");
  REQUIRE(top.has_value());
  CHECK(top->message.find("duplicate") != std::string::npos);
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"m","id":"n","kind":"module","source":""})")));
  CHECK_FALSE(parses(program_of(kModule, R"({"timeout_seconds":1,"timeout_seconds":2})")));
  CHECK_FALSE(parses(run_with_args(R"([{"a":1,"a":1}])")));
  CHECK_FALSE(parses(run_with_args(R"([[[{"x":{"deep":1,"deep":2}}]]])")));
  CHECK_FALSE(parses(run_with_args(R"([{"$ref":"m","$ref":"m"}])")));
  // The same key in sibling objects is fine.
  CHECK(parses(run_with_args(R"([{"a":1},{"a":2},{"b":{"a":3}}])")));
}

TEST_CASE("NaN and Infinity are not JSON") {
  for (const char* literal : {"NaN", "nan", "Infinity", "-Infinity", "inf", "1e999"}) {
    CAPTURE(literal);
    CHECK_FALSE(parses(run_with_args(std::string("[") + literal + "]")));
    CHECK_FALSE(parses(program_of(kModule, std::string(R"({"timeout_seconds":)") + literal + "}")));
  }
}

TEST_CASE("content after the program object is rejected; whitespace is not content") {
  const std::string program = program_of(kModule);
  CHECK_FALSE(parses(program + "{}"));
  CHECK_FALSE(parses(program + " x"));
  CHECK_FALSE(parses(program + ","));
  CHECK_FALSE(parses(program + "]"));
  CHECK_FALSE(parses(program + std::string(1, '\0')));
  CHECK(parses(program + " \n\t\r"));
  CHECK(parses("\n " + program));
}

TEST_CASE("malformed JSON and an empty document are rejected") {
  CHECK_FALSE(parses(""));
  CHECK_FALSE(parses("   "));
  CHECK_FALSE(parses(R"({"instructions":[)"));
  CHECK_FALSE(parses(R"({'instructions':[]})"));
  CHECK_FALSE(parses(run_with_args("[01]")));
  CHECK_FALSE(parses(run_with_args("[1,]")));
  CHECK_FALSE(parses(run_with_args("[\"tab\tinside\"]")));
}

TEST_CASE("invalid UTF-8 anywhere in the text is rejected") {
  for (const char* bad : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\x80", "\xf8\x88\x80\x80\x80"}) {
    CAPTURE(std::string_view(bad).size());
    CHECK_FALSE(parses(program_of(std::string(R"({"op":"upload","id":"m","kind":"module","source":"x)") +
                                  bad + "\"}")));
    CHECK_FALSE(parses(program_of(std::string(R"({"op":"upload","id":")") + bad +
                                  R"(","kind":"module","source":""})")));
  }
  // Valid multi-byte UTF-8 is fine, in values and in ids.
  CHECK(parses(program_of(R"({"op":"upload","id":"模块","kind":"module","source":"# ünïcödé 🚀"})")));
}

TEST_CASE("nesting is bounded by max_depth, the program object included") {
  // program object (1) > instructions (2) > run (3) > args (4) > k nested arrays.
  auto nested = [](int k) { return "[" + std::string(k, '[') + std::string(k, ']') + "]"; };
  kcoral::ProgramLimits limits;
  limits.max_depth = 10;
  CHECK(parses(run_with_args(nested(6)), limits));  // depth 10
  auto error = parse_failure(run_with_args(nested(7)), limits);  // depth 11
  REQUIRE(error.has_value());
  CHECK(error->kind == kcoral::ErrorKind::parse);
  CHECK(error->message.find("deeper") != std::string::npos);
  // The default bound is 64 levels.
  CHECK(parses(run_with_args(nested(60))));
  CHECK_FALSE(parses(run_with_args(nested(61))));
  CHECK_FALSE(parses(run_with_args(nested(100000))));
}

TEST_CASE("a program larger than max_program_bytes is rejected before parsing") {
  kcoral::ProgramLimits limits;
  const std::string program = program_of(kModule);
  limits.max_program_bytes = program.size();
  CHECK(parses(program, limits));
  limits.max_program_bytes = program.size() - 1;
  auto error = parse_failure(program, limits);
  REQUIRE(error.has_value());
  CHECK(error->message.find("larger") != std::string::npos);
}

TEST_CASE("the number of instructions is bounded by max_instructions") {
  kcoral::ProgramLimits limits;
  limits.max_instructions = 2;
  const std::string two = std::string(kModule) + "," + std::string(kFunction);
  CHECK(parses(program_of(two), limits));
  CHECK_FALSE(parses(program_of(two + R"(,{"op":"run","id":"r","fn":{"$ref":"f"}})"), limits));
}

TEST_CASE("ids longer than max_id_bytes are rejected") {
  kcoral::ProgramLimits limits;
  limits.max_id_bytes = 8;
  auto module_with_id = [](const std::string& id) {
    return program_of(R"({"op":"upload","id":")" + id + R"(","kind":"module","source":""})");
  };
  CHECK(parses(module_with_id("12345678"), limits));
  CHECK_FALSE(parses(module_with_id("123456789"), limits));
  CHECK_FALSE(parses(module_with_id(std::string(1025, 'i'))));
  CHECK(parses(module_with_id(std::string(1024, 'i'))));
}

TEST_CASE("timeout_seconds must be a positive number") {
  for (const char* bad : {"0", "-1", "-0.5", "0.0", "\"10\"", "true", "null", "[]", "{}"}) {
    CAPTURE(bad);
    CHECK_FALSE(parses(program_of(kModule, std::string(R"({"timeout_seconds":)") + bad + "}")));
  }
  for (const char* good : {"1", "0.25", "1e3", "1e20", "900.0"}) {
    CAPTURE(good);
    CHECK(parses(program_of(kModule, std::string(R"({"timeout_seconds":)") + good + "}")));
  }
  auto program = kcoral::Program::parse(program_of(kModule, R"({"timeout_seconds":2.5})"));
  REQUIRE(program.has_value());
  CHECK(program->options().timeout_seconds == 2.5);
  CHECK_FALSE(program->options().output_limit_bytes.has_value());
}

TEST_CASE("gpu_count must be an integer from 1 to 8, and the error says so") {
  for (const char* bad : {"0", "9", "-1", "1.5", "2.0", "\"2\"", "true", "null", "[1]", "18446744073709551615",
                          "-9223372036854775808"}) {
    CAPTURE(bad);
    auto program = kcoral::Program::parse(program_of(kModule, std::string(R"({"gpu_count":)") + bad + "}"));
    REQUIRE_FALSE(program.has_value());
    CHECK(program.error().kind == kcoral::ErrorKind::parse);
    CHECK(program.error().message == "'gpu_count' must be an integer between 1 and 8");
  }
  for (std::uint32_t good = 1; good <= kcoral::kMaxGpuCount; ++good) {
    auto program = kcoral::Program::parse(program_of(kModule, R"({"gpu_count":)" + std::to_string(good) + "}"));
    REQUIRE(program.has_value());
    CHECK(program->options().gpu_count == good);
  }
  auto without = kcoral::Program::parse(program_of(kModule, R"({"timeout_seconds":1})"));
  REQUIRE(without.has_value());
  CHECK_FALSE(without->options().gpu_count.has_value());
}

TEST_CASE("output_limit_bytes must be an integer >= 0") {
  for (const char* bad : {"-1", "1.5", "1.0", "1e3", "\"1\"", "true", "false", "null", "18446744073709551616"}) {
    CAPTURE(bad);
    CHECK_FALSE(parses(program_of(kModule, std::string(R"({"output_limit_bytes":)") + bad + "}")));
  }
  auto limit_of = [](const char* text) {
    auto program = kcoral::Program::parse(program_of(kModule, std::string(R"({"output_limit_bytes":)") + text + "}"));
    REQUIRE(program.has_value());
    return program->options().output_limit_bytes.value();
  };
  CHECK(limit_of("0") == 0);
  CHECK(limit_of("1048576") == 1048576);
  CHECK(limit_of("18446744073709551615") == std::numeric_limits<std::uint64_t>::max());
}

TEST_CASE("options must be an object of known options") {
  CHECK_FALSE(parses(program_of(kModule, "[]")));
  CHECK_FALSE(parses(program_of(kModule, "null")));
  CHECK_FALSE(parses(program_of(kModule, R"({"timeout":1})")));
  CHECK_FALSE(parses(program_of(kModule, R"({"timeout_seconds":1,"priority":2})")));
  auto program = kcoral::Program::parse(program_of(kModule, "{}"));
  REQUIRE(program.has_value());
  CHECK_FALSE(program->options().timeout_seconds.has_value());
}

TEST_CASE("every protocol dtype is accepted and anything else is not") {
  for (const char* dtype : {"bool", "uint8", "int8", "float8_e4m3fn", "float8_e5m2", "int16", "float16",
                            "bfloat16", "int32", "float32", "int64", "float64"}) {
    CAPTURE(dtype);
    CHECK(parses(tensor(std::string("\"") + dtype + "\"", "[1]")));
  }
  for (const char* dtype : {"\"float\"", "\"Float32\"", "\"uint16\"", "\"complex64\"", "\"\"", "4", "null"}) {
    CAPTURE(dtype);
    CHECK_FALSE(parses(tensor(dtype, "[1]")));
  }
}

TEST_CASE("a shape is an array of integers >= 0") {
  for (const char* shape : {"[-1]", "[1.5]", "[2.0]", "[\"2\"]", "[true]", "[null]", "[[2]]", "2", "{}",
                            "[18446744073709551615]"}) {
    CAPTURE(shape);
    CHECK_FALSE(parses(tensor("\"int8\"", shape)));
  }
  auto program = kcoral::Program::parse(tensor("\"float16\"", "[2, 0, 3]"));
  REQUIRE(program.has_value());
  const auto& upload = std::get<kcoral::Upload>(program->instructions()[0]);
  CHECK(upload.dtype == kcoral::Dtype::float16);
  CHECK(upload.shape == std::vector<std::int64_t>{2, 0, 3});
  CHECK(parses(tensor("\"int8\"", "[]")));  // a scalar
}

TEST_CASE("a shape's rank is bounded by max_shape_rank") {
  kcoral::ProgramLimits limits;
  limits.max_shape_rank = 3;
  CHECK(parses(tensor("\"int8\"", "[1,1,1]"), limits));
  CHECK_FALSE(parses(tensor("\"int8\"", "[1,1,1,1]"), limits));
}

TEST_CASE("a shape describing more than max_tensor_bytes is rejected without overflow") {
  kcoral::ProgramLimits limits;
  limits.max_tensor_bytes = 1024;
  CHECK(parses(tensor("\"float32\"", "[16,16]"), limits));   // exactly 1024 bytes
  CHECK_FALSE(parses(tensor("\"float32\"", "[16,16,2]"), limits));
  CHECK_FALSE(parses(tensor("\"float64\"", "[129]"), limits));
  // Extents whose product wraps around 64 bits must not slip through.
  CHECK_FALSE(parses(tensor("\"int8\"", "[4294967296,4294967296]")));
  CHECK_FALSE(parses(tensor("\"int64\"", "[2305843009213693952]")));
  CHECK_FALSE(parses(tensor("\"int8\"", "[9223372036854775807,2]")));
  // A zero extent first makes the tensor empty whatever follows.
  CHECK(parses(tensor("\"int8\"", "[0,9223372036854775807,9223372036854775807]")));
}

TEST_CASE("a zero extent anywhere makes the tensor empty") {
  CHECK(parses(tensor("\"int8\"", "[1099511627776,1099511627776,0]")));
}

// A documented limit (README, "Differences on purpose"): simdjson's DOM holds integers in
// 64 bits, so wider ones are refused, with a message that says so and what to do instead.
TEST_CASE("integers wider than 64 bits are refused with a message that says so") {
  auto program = kcoral::Program::parse(run_with_args("[1180591620717411303424]"));
  REQUIRE_FALSE(program.has_value());
  CHECK(program.error().kind == kcoral::ErrorKind::parse);
  CHECK(program.error().message.find("64 bits") != std::string::npos);
  CHECK_FALSE(parses(program_of(kModule, R"({"timeout_seconds":100000000000000000000})")));
  CHECK(parses(run_with_args("[18446744073709551615, -9223372036854775808]")));
}

}  // TEST_SUITE
