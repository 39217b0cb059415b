// Program vocabulary and wire form (libkcoral/src/program.cpp): dtype names and item
// sizes, upload kind and op names, instruction ids, and to_json, whose output parses back
// to an equal program (canonical paths, literals, options, cpu_only, cuda language).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "libkcoral/test_support.hpp"

using kcoral::Dtype;
using kcoral::test::program_of;

TEST_SUITE("program") {

TEST_CASE("each dtype has its wire name and item size, and the names parse back") {
  struct Row {
    Dtype dtype;
    const char* wire;
    std::size_t size;
  };
  for (const Row& row : {Row{Dtype::bool_, "bool", 1}, Row{Dtype::uint8, "uint8", 1}, Row{Dtype::int8, "int8", 1},
                         Row{Dtype::float8_e4m3fn, "float8_e4m3fn", 1}, Row{Dtype::float8_e5m2, "float8_e5m2", 1},
                         Row{Dtype::int16, "int16", 2}, Row{Dtype::float16, "float16", 2},
                         Row{Dtype::bfloat16, "bfloat16", 2}, Row{Dtype::int32, "int32", 4},
                         Row{Dtype::float32, "float32", 4}, Row{Dtype::int64, "int64", 8},
                         Row{Dtype::float64, "float64", 8}}) {
    CAPTURE(row.wire);
    CHECK(kcoral::to_wire(row.dtype) == row.wire);
    CHECK(kcoral::item_size(row.dtype) == row.size);
    CHECK(kcoral::dtype_from_wire(row.wire) == row.dtype);
  }
  CHECK_FALSE(kcoral::dtype_from_wire("bool_").has_value());
  CHECK_FALSE(kcoral::dtype_from_wire("float").has_value());
}

TEST_CASE("upload kinds have their wire names") {
  CHECK(kcoral::to_wire(kcoral::UploadKind::module) == "module");
  CHECK(kcoral::to_wire(kcoral::UploadKind::tensor) == "tensor");
  CHECK(kcoral::to_wire(kcoral::UploadKind::bytes) == "bytes");
  CHECK(kcoral::to_wire(kcoral::UploadKind::file) == "file");
  CHECK(kcoral::to_wire(kcoral::UploadKind::library) == "library");
}

TEST_CASE("op_name and instruction_id describe each instruction") {
  auto program = kcoral::Program::parse(program_of(
      std::string(kcoral::test::kModule) + "," + std::string(kcoral::test::kFunction) +
      R"(,{"op":"run","id":"r","fn":{"$ref":"f"}},{"op":"upload","kind":"file","blob":"$A","path":"p"},)"
      R"({"op":"upload","id":"named","kind":"file","blob":"$A","path":"q"},)"
      R"({"op":"return","key":"k","value":{"$ref":"r"}},{"op":"return","key":"k2","kind":"file","path":"p"})"));
  REQUIRE(program.has_value());
  const auto& is = program->instructions();
  REQUIRE(is.size() == 7);
  const char* ops[] = {"upload", "get_function", "run", "upload", "upload", "return", "return"};
  const char* ids[] = {"m", "f", "r", nullptr, "named", nullptr, nullptr};
  for (std::size_t i = 0; i < is.size(); ++i) {
    CAPTURE(i);
    CHECK(kcoral::op_name(is[i]) == ops[i]);
    auto id = kcoral::instruction_id(is[i]);
    if (ids[i] == nullptr) {
      CHECK_FALSE(id.has_value());
    } else {
      CHECK(id == std::optional<std::string_view>(ids[i]));
    }
  }
}

TEST_CASE("to_json parses back to the same program") {
  const std::string source = program_of(
      R"({"op":"upload","id":"m","kind":"module","source":"def f(*a):\n    return \"ü\"\n"},)"
      R"({"op":"upload","id":"cu","kind":"module","source":"__global__ void k() {}","language":"cuda"},)"
      R"({"op":"get_function","id":"f","module":{"$ref":"m"},"name":"f","cpu_only":true},)"
      R"({"op":"get_function","id":"k","module":{"$ref":"cu"},"name":"k"},)"
      R"({"op":"upload","id":"t","kind":"tensor","blob":"$A","dtype":"bfloat16","shape":[2,0,3]},)"
      R"({"op":"upload","id":"b","kind":"bytes","blob":"$B"},)"
      R"({"op":"upload","id":"l","kind":"library","blob":"$C"},)"
      R"({"op":"upload","kind":"file","blob":"$A","path":"./dir//x.txt"},)"
      R"({"op":"upload","id":"p","kind":"file","blob":"$B","path":"y"},)"
      R"({"op":"run","id":"r","fn":{"$ref":"f"},"args":[{"$ref":"t"},[{"$ref":"b"}],{"n":-1.5,"s":"\u00e9"},null,18446744073709551615]},)"
      R"({"op":"return","key":"v","value":{"$ref":"r"}},)"
      R"({"op":"return","key":"file","kind":"file","path":"dir/./x.txt"},)"
      R"({"op":"return","key":"folder","kind":"folder","path":{"$ref":"p"}})",
      R"({"timeout_seconds":12.5,"output_limit_bytes":0,"gpu_count":2})");
  auto first = kcoral::Program::parse(source);
  REQUIRE(first.has_value());
  const std::string json = first->to_json();
  auto second = kcoral::Program::parse(json);
  REQUIRE_MESSAGE(second.has_value(), json);
  CHECK(second->to_json() == json);
  CHECK(second->blobs() == first->blobs());
  CHECK(second->options().timeout_seconds == 12.5);
  CHECK(second->options().output_limit_bytes == 0u);
  CHECK(second->options().gpu_count == 2u);
  REQUIRE(second->instructions().size() == first->instructions().size());

  const auto& is = second->instructions();
  CHECK(std::get<kcoral::Upload>(is[0]).source == "def f(*a):\n    return \"ü\"\n");
  CHECK(std::get<kcoral::Upload>(is[1]).language == kcoral::ModuleLanguage::cuda);
  CHECK(std::get<kcoral::GetFunction>(is[2]).cpu_only);
  CHECK_FALSE(std::get<kcoral::GetFunction>(is[3]).cpu_only);
  CHECK(std::get<kcoral::Upload>(is[4]).shape == std::vector<std::int64_t>{2, 0, 3});
  CHECK(std::get<kcoral::Upload>(is[4]).dtype == Dtype::bfloat16);
  CHECK(std::get<kcoral::Upload>(is[7]).path == "dir/x.txt");
  CHECK(std::get<kcoral::Upload>(is[7]).id.empty());
  const auto& args = std::get<kcoral::Run>(is[9]).args;
  const auto& original_args = std::get<kcoral::Run>(first->instructions()[9]).args;
  CHECK(args == original_args);
  CHECK(std::get<kcoral::JsonLiteral>(args[4]).json == "18446744073709551615");
  CHECK(std::get<std::string>(std::get<kcoral::ReturnPath>(is[11]).path) == "dir/x.txt");
  CHECK(std::get<kcoral::Ref>(std::get<kcoral::ReturnPath>(is[12]).path).id == "p");
}

TEST_CASE("to_json writes only the fields of each instruction and omits empty options") {
  auto program = kcoral::Program::parse(program_of(
      R"({"op":"upload","id":"m","kind":"module","source":"","language":"python"},)"
      R"({"op":"get_function","id":"f","module":{"$ref":"m"},"name":"f","cpu_only":false},)"
      R"({"op":"upload","kind":"file","blob":"$A","path":"p"})"));
  REQUIRE(program.has_value());
  auto json = nlohmann::json::parse(program->to_json());
  CHECK_FALSE(json.contains("options"));
  const auto& is = json.at("instructions");
  CHECK(is[0] == nlohmann::json::parse(R"({"op":"upload","id":"m","kind":"module","source":""})"));
  CHECK(is[1] == nlohmann::json::parse(R"({"op":"get_function","id":"f","module":{"$ref":"m"},"name":"f"})"));
  CHECK(is[2] == nlohmann::json::parse(kcoral::test::with_digests(
                     R"({"op":"upload","kind":"file","blob":"$A","path":"p"})")));
}

TEST_CASE("literal floats and strings keep their values through to_json") {
  auto program = kcoral::Program::parse(program_of(
      std::string(kcoral::test::kModule) + "," + std::string(kcoral::test::kFunction) +
      R"(,{"op":"run","id":"r","fn":{"$ref":"f"},"args":[0.1, 1.0000000000000002, 5e-324, -9223372036854775808, "a\"b\\c\n\u0000"]})"));
  REQUIRE(program.has_value());
  auto again = kcoral::Program::parse(program->to_json());
  REQUIRE(again.has_value());
  const auto& args = std::get<kcoral::Run>(again->instructions()[2]).args;
  auto value = [&](std::size_t i) { return nlohmann::json::parse(std::get<kcoral::JsonLiteral>(args[i]).json); };
  CHECK(value(0).get<double>() == 0.1);
  CHECK(value(1).get<double>() == 1.0000000000000002);
  CHECK(value(2).get<double>() == 5e-324);
  CHECK(value(3).get<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
  CHECK(value(4).get<std::string>() == std::string("a\"b\\c\n\0", 7));
}

}  // TEST_SUITE
