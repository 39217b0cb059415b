// ProgramBuilder: builds a Program and its blobs in C++, for embedded callers.
//
// Each method appends one instruction and returns a reference to its value; build()
// validates the whole program exactly as the wire parser does (it round-trips through
// the wire form), so a built Program obeys every rule a received one does.
//
//   kcoral::ProgramBuilder b;
//   auto module = b.upload_module("module", "def twice(x):\n    return 2 * x\n");
//   auto twice = b.get_function("twice", module, "twice");
//   auto out = b.run("out", twice, {kcoral::json_literal("21")});
//   b.return_value("out", out);
//   auto built = b.build();  // built->program, built->blobs
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kcoral/blob_store.hpp"
#include "kcoral/program.hpp"

namespace kcoral {

struct BuiltProgram {
  Program program;
  BlobMap blobs;
};

// A JSON literal argument; `json` must be one JSON value.
[[nodiscard]] inline Argument json_literal(std::string json) { return JsonLiteral{std::move(json)}; }

class ProgramBuilder {
 public:
  Ref upload_module(std::string id, std::string source,
                    ModuleLanguage language = ModuleLanguage::python);
  Ref upload_bytes(std::string id, std::string_view data);
  Ref upload_tensor(std::string id, std::string_view data, Dtype dtype, std::vector<std::int64_t> shape);
  Ref upload_library(std::string id, std::string_view data);
  // `id` may be empty: the file is then written but names no value.
  Ref upload_file(std::string path, std::string_view data, std::string id = {});
  Ref get_function(std::string id, const Ref& module, std::string name, bool cpu_only = false);
  Ref run(std::string id, const Ref& fn, std::vector<Argument> args = {});
  void return_value(std::string key, const Ref& value);
  void return_file(std::string key, std::string path);
  void return_folder(std::string key, std::string path);
  void set_options(ProgramOptions options) { options_ = options; }

  [[nodiscard]] Result<BuiltProgram> build() const;

 private:
  std::string add_blob(std::string_view data);

  std::vector<Instruction> instructions_;
  ProgramOptions options_;
  BlobMap blobs_;
  std::vector<Error> errors_;  // blob failures, reported by build()
};

}  // namespace kcoral
