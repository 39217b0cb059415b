// ProgramBuilder (libkcoral/src/program_builder.cpp): each method appends the instruction
// it names and returns a reference to its value; build() yields a valid Program plus the
// blobs it references (keyed by SHA-256, deduplicated), or fails with `parse` exactly
// where the wire parser would.
#include <doctest/doctest.h>

#include "kcoral/program_builder.hpp"
#include "kcoral/sha256.hpp"

using kcoral::ErrorKind;
using kcoral::ProgramBuilder;

namespace {

kcoral::Error build_error(const ProgramBuilder& builder) {
  auto built = builder.build();
  REQUIRE_FALSE(built.has_value());
  return built.error();
}

}  // namespace

TEST_SUITE("program_builder") {

TEST_CASE("a built program holds every instruction kind and the blobs it references") {
  ProgramBuilder b;
  auto module = b.upload_module("module", "def f(*a):\n    return a\n");
  auto cuda = b.upload_module("cu", "__global__ void k() {}", kcoral::ModuleLanguage::cuda);
  auto f = b.get_function("f", module, "f", /*cpu_only=*/true);
  auto k = b.get_function("k", cuda, "k");
  auto bytes = b.upload_bytes("bytes", "raw");
  const std::string floats(16, '\0');
  auto tensor = b.upload_tensor("t", floats, kcoral::Dtype::float32, {2, 2});
  auto file = b.upload_file("./dir//in.txt", "file text", "in");
  b.upload_file("anonymous.txt", "raw");  // same bytes as `bytes`: one blob
  auto out = b.run("out", f, {tensor, kcoral::json_literal(R"({"k": [1, 2]})"), bytes, k, file});
  b.return_value("out", out);
  b.return_file("file", "dir/in.txt");
  b.return_folder("folder", "dir");
  kcoral::ProgramOptions options;
  options.timeout_seconds = 5;
  b.set_options(options);

  CHECK(module.id == "module");
  CHECK(out.id == "out");
  auto built = b.build();
  REQUIRE_MESSAGE(built.has_value(), built.error().message);
  const auto& is = built->program.instructions();
  REQUIRE(is.size() == 12);
  CHECK(std::get<kcoral::Upload>(is[1]).language == kcoral::ModuleLanguage::cuda);
  CHECK(std::get<kcoral::GetFunction>(is[2]).cpu_only);
  CHECK(std::get<kcoral::Upload>(is[6]).path == "dir/in.txt");
  CHECK(std::get<kcoral::Upload>(is[7]).id.empty());
  const auto& args = std::get<kcoral::Run>(is[8]).args;
  REQUIRE(args.size() == 5);
  CHECK(std::get<kcoral::Ref>(args[0]).id == "t");
  CHECK(std::get<kcoral::JsonLiteral>(args[1]).json == R"({"k":[1,2]})");
  CHECK(std::get<kcoral::ReturnPath>(is[11]).kind == kcoral::PathKind::folder);
  CHECK(built->program.options().timeout_seconds == 5.0);

  CHECK(built->blobs.size() == 3);
  CHECK(built->program.blobs().size() == 3);
  for (const std::string& digest : built->program.blobs()) {
    CAPTURE(digest);
    REQUIRE(built->blobs.contains(digest));
    CHECK(kcoral::sha256_hex(built->blobs.at(digest).view()) == digest);
  }
  CHECK(built->blobs.at(kcoral::sha256_hex("raw")).view() == "raw");
  CHECK(built->blobs.at(kcoral::sha256_hex(floats)).size() == 16);
  CHECK(built->blobs.at(kcoral::sha256_hex("file text")).view() == "file text");
}

TEST_CASE("a built program survives the wire form unchanged") {
  ProgramBuilder b;
  auto m = b.upload_module("m", "x = 1\n");
  auto f = b.get_function("f", m, "f");
  b.return_value("v", b.run("r", f, {kcoral::json_literal("[1, \"two\", null]")}));
  auto built = b.build();
  REQUIRE(built.has_value());
  auto reparsed = kcoral::Program::parse(built->program.to_json());
  REQUIRE(reparsed.has_value());
  CHECK(reparsed->to_json() == built->program.to_json());
}

TEST_CASE("an empty builder fails: a program has at least one instruction") {
  ProgramBuilder b;
  CHECK(build_error(b).kind == ErrorKind::parse);
}

TEST_CASE("references to unknown or later ids fail the build") {
  ProgramBuilder b;
  b.run("r", kcoral::Ref{"nowhere"});
  CHECK(build_error(b).kind == ErrorKind::parse);

  ProgramBuilder later;
  later.run("r", kcoral::Ref{"f"});
  later.get_function("f", later.upload_module("m", ""), "f");
  CHECK(build_error(later).kind == ErrorKind::parse);

  ProgramBuilder nested;
  auto m = nested.upload_module("m", "");
  nested.run("r", nested.get_function("f", m, "f"), {kcoral::Ref{"later"}});
  nested.upload_bytes("later", "x");
  CHECK(build_error(nested).kind == ErrorKind::parse);
}

TEST_CASE("duplicate ids and duplicate return keys fail the build") {
  ProgramBuilder ids;
  ids.upload_bytes("x", "1");
  ids.upload_bytes("x", "2");
  CHECK(build_error(ids).message.find("duplicate") != std::string::npos);

  ProgramBuilder keys;
  auto x = keys.upload_bytes("x", "1");
  keys.return_value("k", x);
  keys.return_file("k", "p");
  CHECK(build_error(keys).message.find("duplicate") != std::string::npos);
}

TEST_CASE("a missing id on a value-making upload fails the build") {
  ProgramBuilder b;
  b.upload_bytes("", "data");
  CHECK(build_error(b).kind == ErrorKind::parse);
}

TEST_CASE("bad paths and colliding file uploads fail the build") {
  for (const char* path : {"../escape", "/abs", "a\\b", "", "."}) {
    CAPTURE(path);
    ProgramBuilder upload;
    upload.upload_file(path, "x");
    CHECK(build_error(upload).kind == ErrorKind::parse);
    ProgramBuilder ret;
    ret.upload_file("ok", "x");
    ret.return_file("k", path);
    CHECK(build_error(ret).kind == ErrorKind::parse);
  }
  ProgramBuilder collide;
  collide.upload_file("a", "1");
  collide.upload_file("a/b", "2");
  CHECK(build_error(collide).kind == ErrorKind::parse);
}

TEST_CASE("a JSON literal that is not one JSON value fails the build with parse") {
  for (const char* literal : {"", "{", "NaN", "1 2", "[1,]", "'single'"}) {
    CAPTURE(literal);
    ProgramBuilder b;
    auto m = b.upload_module("m", "");
    b.run("r", b.get_function("f", m, "f"), {kcoral::json_literal(literal)});
    CHECK(build_error(b).kind == ErrorKind::parse);
  }
}

TEST_CASE("a module source or id that is not UTF-8 fails the build with parse") {
  ProgramBuilder source;
  source.upload_module("m", "x = '\xff'\n");
  CHECK(build_error(source).kind == ErrorKind::parse);
  ProgramBuilder id;
  id.upload_bytes("\xc0", "x");
  CHECK(build_error(id).kind == ErrorKind::parse);
}

TEST_CASE("a get_function on a bytes upload builds: it fails when it runs") {
  ProgramBuilder b;
  b.get_function("f", b.upload_bytes("b", "x"), "f");
  CHECK(b.build().has_value());
}

TEST_CASE("a tensor shape is validated by build(); an empty tensor is fine") {
  ProgramBuilder negative;
  negative.upload_tensor("t", "", kcoral::Dtype::int8, {-1});
  CHECK(build_error(negative).kind == ErrorKind::parse);
  ProgramBuilder ok;
  ok.upload_tensor("t", "", kcoral::Dtype::int8, {0, 5});
  CHECK(ok.build().has_value());
}

TEST_CASE("invalid options fail the build") {
  ProgramBuilder b;
  b.upload_bytes("b", "x");
  kcoral::ProgramOptions options;
  options.timeout_seconds = 0;
  b.set_options(options);
  CHECK(build_error(b).kind == ErrorKind::parse);
  options.timeout_seconds = -3;
  b.set_options(options);
  CHECK(build_error(b).kind == ErrorKind::parse);
}

TEST_CASE("the builder can be built twice and keeps its instructions") {
  ProgramBuilder b;
  b.upload_bytes("b", "x");
  auto first = b.build();
  auto second = b.build();
  REQUIRE(first.has_value());
  REQUIRE(second.has_value());
  CHECK(first->program.to_json() == second->program.to_json());
  CHECK(first->blobs.begin()->second.view() == second->blobs.begin()->second.view());
}

}  // TEST_SUITE
