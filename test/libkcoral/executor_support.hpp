// Helpers for the executor tests: one Executor per test process (one interpreter), and
// running a built program to its result with the results tree parsed.
#pragma once

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "kcoral/executor.hpp"
#include "kcoral/program_builder.hpp"

namespace kcoral::test {

using Json = nlohmann::ordered_json;

// The process's executor, made on first use (the interpreter lives as long as the process).
inline Executor& executor() {
  static Executor* instance = [] {
    auto created = Executor::create({});
    REQUIRE_MESSAGE(created.has_value(), created.error().message);
    return created->release();
  }();
  return *instance;
}

struct Ran {
  ProgramResult result;
  Json results;  // result.results_json, parsed (integers past 64 bits become floats)
  [[nodiscard]] const InstructionError& error() const {
    REQUIRE(result.error.has_value());
    return *result.error;
  }
};

inline Ran run(const Program& program, const BlobMap& blobs, const RunOptions& options = {},
               GpuLease* lease = nullptr) {
  NoGpuLease no_gpu;
  Ran ran{executor().run(program, blobs, lease != nullptr ? *lease : no_gpu, options), {}};
  ran.results = Json::parse(ran.result.results_json);
  return ran;
}

inline Ran run(const ProgramBuilder& builder, const RunOptions& options = {}, GpuLease* lease = nullptr) {
  auto built = builder.build();
  REQUIRE_MESSAGE(built.has_value(), built.error().message);
  return run(built->program, built->blobs, options, lease);
}

// ProgramBuilder writes literal return paths only: this runs a built program after turning
// each return path written "@<id>" into the reference {"$ref": "<id>"}.
inline Ran run_with_path_refs(const ProgramBuilder& builder, const RunOptions& options = {}) {
  auto built = builder.build();
  REQUIRE_MESSAGE(built.has_value(), built.error().message);
  nlohmann::json wire = nlohmann::json::parse(built->program.to_json());
  for (auto& instruction : wire["instructions"]) {
    if (instruction["op"] != "return" || !instruction.contains("path")) continue;
    std::string path = instruction["path"];
    if (path.starts_with("@")) instruction["path"] = {{"$ref", path.substr(1)}};
  }
  auto program = Program::parse(wire.dump());
  REQUIRE_MESSAGE(program.has_value(), program.error().message);
  return run(*program, built->blobs, options);
}

// A program of one Python module `source` whose function `name` runs with `args` and whose
// value is returned under "out".
inline ProgramBuilder call(std::string source, std::string name = "main", std::vector<Argument> args = {}) {
  ProgramBuilder b;
  auto module = b.upload_module("m", std::move(source));
  auto fn = b.get_function("fn", module, std::move(name));
  b.return_value("out", b.run("out", fn, std::move(args)));
  return b;
}

// The returned "out" of a program that must complete.
inline Json out_of(const ProgramBuilder& builder, const RunOptions& options = {}) {
  Ran ran = run(builder, options);
  REQUIRE_MESSAGE(ran.result.completed(), (ran.result.error->message + "\n" + ran.result.error->traceback));
  return ran.results["out"];
}

}  // namespace kcoral::test
