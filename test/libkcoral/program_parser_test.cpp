// Program::parse (libkcoral/src/program_parser.cpp), the instruction rules: which fields
// each instruction kind allows and requires, references (earlier ids only, exact form),
// unique ids and return keys, get_function targets, tensor metadata, upload and return
// paths, options, and literal arguments kept as minified JSON. Limits and JSON-level
// strictness (duplicate keys, NaN, UTF-8, depth) are in program_parser_limits_test.cpp.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "libkcoral/test_support.hpp"

using kcoral::test::kFunction;
using kcoral::test::kModule;
using kcoral::test::parse_failure;
using kcoral::test::parses;
using kcoral::test::program_of;
using Json = nlohmann::ordered_json;

namespace {

// One instruction kind: instructions it needs before it, the instruction itself, and
// which of its fields are required.
struct Shape {
  const char* name;
  const char* prefix;
  const char* instruction;
  std::vector<std::string> required;
  std::vector<std::string> optional;
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all{
      {"python module", "", R"({"op":"upload","id":"x","kind":"module","source":"","language":"python"})",
       {"op", "id", "kind", "source"}, {"language"}},
      {"cuda module", "", R"({"op":"upload","id":"x","kind":"module","source":"k","language":"cuda"})",
       {"op", "id", "kind", "source"}, {"language"}},
      {"tensor", "", R"({"op":"upload","id":"x","kind":"tensor","blob":"$A","dtype":"int8","shape":[2]})",
       {"op", "id", "kind", "blob", "dtype", "shape"}, {}},
      {"bytes", "", R"({"op":"upload","id":"x","kind":"bytes","blob":"$A"})", {"op", "id", "kind", "blob"}, {}},
      {"library", "", R"({"op":"upload","id":"x","kind":"library","blob":"$A"})",
       {"op", "id", "kind", "blob"}, {}},
      {"file", "", R"({"op":"upload","id":"x","kind":"file","blob":"$A","path":"p"})",
       {"op", "kind", "blob", "path"}, {"id"}},
      {"get_function", R"({"op":"upload","id":"m","kind":"module","source":""},)",
       R"({"op":"get_function","id":"x","module":{"$ref":"m"},"name":"f","cpu_only":true})",
       {"op", "id", "module", "name"}, {"cpu_only"}},
      {"run", R"({"op":"upload","id":"m","kind":"module","source":""},{"op":"get_function","id":"f","module":{"$ref":"m"},"name":"f"},)",
       R"({"op":"run","id":"x","fn":{"$ref":"f"},"args":[1]})", {"op", "id", "fn"}, {"args"}},
      {"value return", R"({"op":"upload","id":"b","kind":"bytes","blob":"$A"},)",
       R"({"op":"return","key":"x","value":{"$ref":"b"}})", {"op", "key", "value"}, {}},
      {"file return", "", R"({"op":"return","key":"x","kind":"file","path":"p"})",
       {"op", "key", "kind", "path"}, {}},
      {"folder return", "", R"({"op":"return","key":"x","kind":"folder","path":"p"})",
       {"op", "key", "kind", "path"}, {}},
  };
  return all;
}

std::string with_instruction(const Shape& shape, const Json& instruction) {
  return program_of(std::string(shape.prefix) + instruction.dump());
}

}  // namespace

TEST_SUITE("program_parser") {

TEST_CASE("every instruction kind parses with all of its fields") {
  for (const Shape& shape : shapes()) {
    CAPTURE(shape.name);
    CHECK(parses(program_of(std::string(shape.prefix) + shape.instruction)));
  }
}

TEST_CASE("an unknown field is rejected in every instruction kind") {
  for (const Shape& shape : shapes()) {
    CAPTURE(shape.name);
    Json instruction = Json::parse(kcoral::test::with_digests(shape.instruction));
    instruction["comment"] = "hi";
    auto error = parse_failure(with_instruction(shape, instruction));
    REQUIRE(error.has_value());
    CHECK(error->kind == kcoral::ErrorKind::parse);
    CHECK(error->message.find("comment") != std::string::npos);
  }
}

TEST_CASE("a field of another instruction kind is rejected") {
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"x","kind":"bytes","blob":"$A","path":"p"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"x","kind":"module","source":"","blob":"$A"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"x","kind":"tensor","blob":"$A","dtype":"int8","shape":[1],"language":"cuda"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"x","kind":"library","blob":"$A","name":"f"})")));
  CHECK_FALSE(parses(program_of(std::string(kModule) + R"(,{"op":"run","id":"x","fn":{"$ref":"m"},"cpu_only":true})")));
  CHECK_FALSE(parses(program_of(std::string(kModule) + R"(,{"op":"return","key":"k","value":{"$ref":"m"},"path":"p"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"return","key":"k","kind":"file","path":"p","value":{"$ref":"m"}})")));
}

TEST_CASE("removing any required field fails and removing an optional one does not") {
  for (const Shape& shape : shapes()) {
    CAPTURE(shape.name);
    const Json full = Json::parse(kcoral::test::with_digests(shape.instruction));
    for (const std::string& field : shape.required) {
      CAPTURE(field);
      Json instruction = full;
      instruction.erase(field);
      auto error = parse_failure(with_instruction(shape, instruction));
      REQUIRE(error.has_value());
      CHECK(error->kind == kcoral::ErrorKind::parse);
    }
    for (const std::string& field : shape.optional) {
      CAPTURE(field);
      Json instruction = full;
      instruction.erase(field);
      CHECK(parses(with_instruction(shape, instruction)));
    }
  }
}

TEST_CASE("an instruction that is not an object, or has an unknown or non-string op, fails") {
  CHECK_FALSE(parses(program_of("1")));
  CHECK_FALSE(parses(program_of("[]")));
  CHECK_FALSE(parses(program_of(R"({"op":"delete","id":"x"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"Upload","id":"x","kind":"bytes","blob":"$A"})")));
  CHECK_FALSE(parses(program_of(R"({"op":7,"id":"x","kind":"bytes","blob":"$A"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"x","kind":"blob","blob":"$A"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"x","kind":1,"blob":"$A"})")));
}

TEST_CASE("errors name the index of the failing instruction") {
  auto error = parse_failure(program_of(std::string(kModule) + R"(,{"op":"bogus"})"));
  REQUIRE(error.has_value());
  CHECK(error->message.rfind("instruction 1: ", 0) == 0);
}

TEST_CASE("the program must be an object with a non-empty instructions array and nothing else") {
  CHECK_FALSE(parses("[]"));
  CHECK_FALSE(parses(R"("program")"));
  CHECK_FALSE(parses(R"({})"));
  CHECK_FALSE(parses(R"({"instructions":[]})"));
  CHECK_FALSE(parses(R"({"instructions":{}})"));
  CHECK_FALSE(parses(R"({"instructions":null})"));
  CHECK_FALSE(parses(program_of(kModule).insert(1, R"("version":1,)")));
  CHECK(parses(program_of(kModule)));
}

TEST_CASE("references must name an earlier instruction") {
  // Forward reference: the function is defined after the run that uses it.
  CHECK_FALSE(parses(program_of(std::string(kModule) + R"(,{"op":"run","id":"r","fn":{"$ref":"f"}},)" +
                                std::string(kFunction))));
  CHECK_FALSE(parses(program_of(std::string(kModule) + R"(,{"op":"run","id":"r","fn":{"$ref":"nope"}})")));
  // An instruction cannot reference its own id.
  CHECK_FALSE(parses(program_of(std::string(kModule) + R"(,{"op":"run","id":"r","fn":{"$ref":"r"}})")));
  CHECK_FALSE(parses(program_of(R"({"op":"return","key":"k","value":{"$ref":"m"}},)" + std::string(kModule))));
  CHECK_FALSE(parses(program_of(R"({"op":"return","key":"k","kind":"file","path":{"$ref":"p"}})")));
  // A return key is not an id.
  CHECK_FALSE(parses(program_of(std::string(kModule) + R"(,{"op":"return","key":"k","value":{"$ref":"m"}},)" +
                                R"({"op":"return","key":"k2","value":{"$ref":"k"}})")));
  CHECK(parses(program_of(std::string(kModule) + "," + std::string(kFunction) +
                          R"(,{"op":"run","id":"r","fn":{"$ref":"f"}},{"op":"return","key":"k","value":{"$ref":"r"}})")));
}

TEST_CASE("a reference is exactly {\"$ref\": \"<non-empty id>\"}") {
  for (const char* module : {R"("m")", R"({"$ref":"m","x":1})", R"({"$ref":1})", R"({"$ref":""})",
                             R"({"ref":"m"})", R"(["m"])", "null"}) {
    CAPTURE(module);
    CHECK_FALSE(parses(program_of(std::string(kModule) +
                                  R"(,{"op":"get_function","id":"f","name":"f","module":)" + module + "}")));
  }
}

TEST_CASE("ids are unique non-empty strings across every value-making instruction") {
  CHECK_FALSE(parses(program_of(std::string(kModule) + "," + std::string(kModule))));
  CHECK_FALSE(parses(program_of(std::string(kModule) + R"(,{"op":"upload","id":"m","kind":"bytes","blob":"$A"})")));
  CHECK_FALSE(parses(program_of(std::string(kModule) + R"(,{"op":"upload","id":"m","kind":"file","blob":"$A","path":"p"})")));
  CHECK_FALSE(parses(program_of(std::string(kModule) + R"(,{"op":"get_function","id":"m","module":{"$ref":"m"},"name":"f"})")));
  CHECK_FALSE(parses(program_of(std::string(kModule) + "," + std::string(kFunction) +
                                R"(,{"op":"run","id":"f","fn":{"$ref":"f"}})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"","kind":"bytes","blob":"$A"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":5,"kind":"bytes","blob":"$A"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":null,"kind":"bytes","blob":"$A"})")));
  // Ids differing only in case are different ids.
  CHECK(parses(program_of(R"({"op":"upload","id":"x","kind":"bytes","blob":"$A"},{"op":"upload","id":"X","kind":"bytes","blob":"$A"})")));
}

TEST_CASE("return keys are unique non-empty strings, in their own namespace") {
  const std::string bytes = R"({"op":"upload","id":"b","kind":"bytes","blob":"$A"})";
  CHECK_FALSE(parses(program_of(bytes + R"(,{"op":"return","key":"k","value":{"$ref":"b"}},{"op":"return","key":"k","value":{"$ref":"b"}})")));
  CHECK_FALSE(parses(program_of(bytes + R"(,{"op":"return","key":"k","value":{"$ref":"b"}},{"op":"return","key":"k","kind":"file","path":"p"})")));
  CHECK_FALSE(parses(program_of(bytes + R"(,{"op":"return","key":"","value":{"$ref":"b"}})")));
  CHECK_FALSE(parses(program_of(bytes + R"(,{"op":"return","key":1,"value":{"$ref":"b"}})")));
  // A key may equal an id, and one value may be returned under two keys.
  CHECK(parses(program_of(bytes + R"(,{"op":"return","key":"b","value":{"$ref":"b"}},{"op":"return","key":"c","value":{"$ref":"b"}})")));
}

TEST_CASE("get_function may name any earlier value: its kind is checked when it runs") {
  const std::string function = R"(,{"op":"get_function","id":"g","module":{"$ref":"t"},"name":"f"})";
  for (const char* target : {R"({"op":"upload","id":"t","kind":"bytes","blob":"$A"})",
                             R"({"op":"upload","id":"t","kind":"tensor","blob":"$A","dtype":"int8","shape":[0]})",
                             R"({"op":"upload","id":"t","kind":"file","blob":"$A","path":"p"})"}) {
    CAPTURE(target);
    CHECK(parses(program_of(target + function)));
  }
  CHECK_FALSE(parses(program_of(R"({"op":"get_function","id":"g","module":{"$ref":"later"},"name":"f"})")));
}

TEST_CASE("get_function needs a non-empty name and a boolean cpu_only") {
  const std::string head = std::string(kModule) + R"(,{"op":"get_function","id":"g","module":{"$ref":"m"},)";
  CHECK_FALSE(parses(program_of(head + R"("name":""})")));
  CHECK_FALSE(parses(program_of(head + R"("name":3})")));
  CHECK_FALSE(parses(program_of(head + R"("name":"f","cpu_only":"true"})")));
  CHECK_FALSE(parses(program_of(head + R"("name":"f","cpu_only":1})")));
  CHECK_FALSE(parses(program_of(head + R"("name":"f","cpu_only":null})")));
  auto program = kcoral::Program::parse(program_of(head + R"("name":"f","cpu_only":true})"));
  REQUIRE(program.has_value());
  CHECK(std::get<kcoral::GetFunction>(program->instructions()[1]).cpu_only);
}

TEST_CASE("a module's language is python or cuda and its source a string") {
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"m","kind":"module","source":"","language":"c++"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"m","kind":"module","source":"","language":"CUDA"})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"m","kind":"module","source":"","language":1})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"m","kind":"module","source":1})")));
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"m","kind":"module","source":null})")));
  auto program = kcoral::Program::parse(program_of(R"({"op":"upload","id":"m","kind":"module","source":"k","language":"cuda"})"));
  REQUIRE(program.has_value());
  CHECK(std::get<kcoral::Upload>(program->instructions()[0]).language == kcoral::ModuleLanguage::cuda);
}

TEST_CASE("blob fields must be lowercase hex SHA-256 digests") {
  for (std::string blob : {std::string(64, 'A'), std::string(63, 'a'), std::string(65, 'a'),
                           std::string(64, 'g'), std::string("")}) {
    CAPTURE(blob);
    CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"b","kind":"bytes","blob":")" + blob + "\"}")));
  }
  CHECK_FALSE(parses(program_of(R"({"op":"upload","id":"b","kind":"bytes","blob":1})")));
}

TEST_CASE("blobs() lists distinct digests in first-use order") {
  auto program = kcoral::Program::parse(program_of(
      R"({"op":"upload","id":"b","kind":"bytes","blob":"$B"},)"
      R"({"op":"upload","kind":"file","blob":"$A","path":"x"},)"
      R"({"op":"upload","id":"c","kind":"library","blob":"$B"},)"
      R"({"op":"upload","id":"t","kind":"tensor","blob":"$C","dtype":"int8","shape":[64]})"));
  REQUIRE(program.has_value());
  using kcoral::test::digest_of_char;
  CHECK(program->blobs() == std::vector<std::string>{digest_of_char('b'), digest_of_char('a'), digest_of_char('c')});
}

TEST_CASE("a program of 99,999 uploads lists each of its blobs once, in first-use order") {
  // The largest number of uploads a program may have: each digest looked up as it comes (a
  // scan of those before took the parser time quadratic in them: minutes for these).
  auto digest = [](std::size_t n) {
    std::string hex = std::to_string(n);
    return std::string(64 - hex.size(), 'a') + hex;
  };
  std::string instructions;
  for (std::size_t i = 0; i < 99999; ++i) {
    if (i > 0) instructions += ',';
    instructions += R"({"op":"upload","id":"b)" + std::to_string(i) + R"(","kind":"bytes","blob":")" +
                    digest(i % 50000) + "\"}";
  }
  auto program = kcoral::Program::parse(program_of(instructions));
  REQUIRE(program.has_value());
  REQUIRE(program->blobs().size() == 50000);
  for (std::size_t i = 0; i < 50000; ++i) REQUIRE(program->blobs()[i] == digest(i));
}

TEST_CASE("return kinds are file or folder, with a path string or a reference") {
  const std::string head = R"({"op":"return","key":"k","kind":)";
  CHECK_FALSE(parses(program_of(head + R"("dir","path":"p"})")));
  CHECK_FALSE(parses(program_of(head + R"("File","path":"p"})")));
  CHECK_FALSE(parses(program_of(head + R"(null,"path":"p"})")));
  CHECK_FALSE(parses(program_of(head + R"("file","path":5})")));
  CHECK_FALSE(parses(program_of(head + R"("file","path":["p"]})")));
  CHECK_FALSE(parses(program_of(head + R"("file","path":"../p"})")));
  auto program = kcoral::Program::parse(program_of(
      R"({"op":"upload","id":"p","kind":"file","blob":"$A","path":"./d//x"},)" + head +
      R"("folder","path":{"$ref":"p"}},)" + R"({"op":"return","key":"k2","kind":"file","path":"./d//x"})"));
  REQUIRE(program.has_value());
  const auto& by_ref = std::get<kcoral::ReturnPath>(program->instructions()[1]);
  CHECK(by_ref.kind == kcoral::PathKind::folder);
  CHECK(std::get<kcoral::Ref>(by_ref.path).id == "p");
  const auto& literal = std::get<kcoral::ReturnPath>(program->instructions()[2]);
  CHECK(std::get<std::string>(literal.path) == "d/x");
  CHECK(std::get<kcoral::Upload>(program->instructions()[0]).path == "d/x");
}

TEST_CASE("run args must be an array; only exact top-level references are resolved") {
  const std::string head = std::string(kModule) + "," + std::string(kFunction) + R"(,{"op":"run","id":"r","fn":{"$ref":"f"},"args":)";
  CHECK_FALSE(parses(program_of(head + R"({"a":1}})")));
  CHECK_FALSE(parses(program_of(head + R"("x"})")));
  CHECK_FALSE(parses(program_of(head + R"(null})")));
  CHECK_FALSE(parses(program_of(head + R"([{"$ref":"unknown"}]})")));
  auto program = kcoral::Program::parse(program_of(
      head + R"([{"$ref":"m"}, [{"$ref":"m"}], {"a": {"$ref":"nowhere"}}, {"$ref":"m","x":1}, {"$ref":5}, )"
             R"( 1 , "s", null, true, [ 1, 2 ], {"k": "v"}, -0.5, 1e2]})"));
  REQUIRE(program.has_value());
  const auto& args = std::get<kcoral::Run>(program->instructions()[2]).args;
  REQUIRE(args.size() == 13);
  CHECK(std::get<kcoral::Ref>(args[0]).id == "m");
  auto literal = [&](std::size_t i) { return std::get<kcoral::JsonLiteral>(args[i]).json; };
  CHECK(literal(1) == R"([{"$ref":"m"}])");
  CHECK(literal(2) == R"({"a":{"$ref":"nowhere"}})");
  CHECK(literal(3) == R"({"$ref":"m","x":1})");
  CHECK(literal(4) == R"({"$ref":5})");
  CHECK(literal(5) == "1");
  CHECK(literal(6) == R"("s")");
  CHECK(literal(7) == "null");
  CHECK(literal(8) == "true");
  CHECK(literal(9) == "[1,2]");
  CHECK(literal(10) == R"({"k":"v"})");
  CHECK(Json::parse(literal(11)).get<double>() == -0.5);
  CHECK(Json::parse(literal(12)).get<double>() == 100.0);
}

TEST_CASE("a run without args has none") {
  auto program = kcoral::Program::parse(
      program_of(std::string(kModule) + "," + std::string(kFunction) + R"(,{"op":"run","id":"r","fn":{"$ref":"f"}})"));
  REQUIRE(program.has_value());
  CHECK(std::get<kcoral::Run>(program->instructions()[2]).args.empty());
}

}  // TEST_SUITE
