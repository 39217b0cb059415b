// Program: an ordered, validated list of instructions (upload, get_function, run, return).
//
// A Program comes from the wire (`Program::parse`, strict: every rule of docs/protocol.md) or
// from `ProgramBuilder` (embedded callers). Both paths end in the same validation, so a
// Program that exists is valid: references name earlier instructions, ids and return keys
// are unique, paths are canonical and do not collide, tensor metadata is consistent.
// Immutable once built; safe to share between threads.
//
//   auto program = kcoral::Program::parse(json_text);
//   if (!program) report(program.error());
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kcoral/error.hpp"

namespace kcoral {

enum class Dtype {
  bool_,
  uint8,
  int8,
  float8_e4m3fn,
  float8_e5m2,
  int16,
  float16,
  bfloat16,
  int32,
  float32,
  int64,
  float64,
};

inline constexpr Dtype kAllDtypes[] = {
    Dtype::bool_, Dtype::uint8,   Dtype::int8,     Dtype::float8_e4m3fn, Dtype::float8_e5m2, Dtype::int16,
    Dtype::float16, Dtype::bfloat16, Dtype::int32, Dtype::float32,       Dtype::int64,       Dtype::float64,
};

[[nodiscard]] std::string_view to_wire(Dtype dtype);
[[nodiscard]] std::optional<Dtype> dtype_from_wire(std::string_view text);
[[nodiscard]] std::size_t item_size(Dtype dtype);

// A reference to the value of an earlier instruction: `{"$ref": "<id>"}`.
struct Ref {
  std::string id;
  bool operator==(const Ref&) const = default;
};

// A JSON literal argument, kept as minified JSON text.
struct JsonLiteral {
  std::string json;
  bool operator==(const JsonLiteral&) const = default;
};

using Argument = std::variant<Ref, JsonLiteral>;

enum class UploadKind { module, tensor, bytes, file, library };
enum class ModuleLanguage { python, cuda };
enum class PathKind { file, folder };

[[nodiscard]] std::string_view to_wire(UploadKind kind);

struct Upload {
  std::string id;  // empty only for a file upload without an id
  UploadKind kind = UploadKind::module;
  std::string source;                                    // module
  ModuleLanguage language = ModuleLanguage::python;      // module
  std::string blob;                                      // tensor, bytes, file, library
  Dtype dtype = Dtype::float32;                          // tensor
  std::vector<std::int64_t> shape;                       // tensor
  std::string path;                                      // file (canonical)
};

struct GetFunction {
  std::string id;
  Ref module;
  std::string name;
  bool cpu_only = false;
};

struct Run {
  std::string id;
  Ref fn;
  std::vector<Argument> args;
};

struct ReturnValue {
  std::string key;
  Ref value;
};

struct ReturnPath {
  std::string key;
  PathKind kind = PathKind::file;
  std::variant<std::string, Ref> path;  // a canonical literal path or a reference
};

using Instruction = std::variant<Upload, GetFunction, Run, ReturnValue, ReturnPath>;

// "upload", "get_function", "run" or "return".
[[nodiscard]] std::string_view op_name(const Instruction& instruction);
// The instruction's id, or nullopt for a return or an anonymous file upload.
[[nodiscard]] std::optional<std::string_view> instruction_id(const Instruction& instruction);

// The most GPUs one program may ask for (options.gpu_count), as KCoral's protocol has it.
inline constexpr std::uint32_t kMaxGpuCount = 8;

struct ProgramOptions {
  std::optional<double> timeout_seconds;
  std::optional<std::uint64_t> output_limit_bytes;
  std::optional<std::uint32_t> gpu_count;  // GPUs the program holds at once: 1-8, as KCoral takes it
};

// Bounds set before any input is read; exceeding one is a `parse` error.
struct ProgramLimits {
  std::size_t max_program_bytes = 64u << 20;
  std::size_t max_instructions = 100000;
  std::size_t max_depth = 64;  // JSON nesting, program object included
  std::size_t max_id_bytes = 1024;
  std::size_t max_shape_rank = 64;
  std::uint64_t max_tensor_bytes = std::uint64_t{1} << 40;
};

class Program {
 public:
  // Strict parse of the `program` part: allowed fields only, no duplicate keys, no
  // NaN/Infinity, no trailing content, valid UTF-8, references only to earlier ids.
  [[nodiscard]] static Result<Program> parse(std::string_view json,
                                             const ProgramLimits& limits = {});

  // At most the memory `parse` takes for `json` at its peak, counted from the text's
  // tokens in one pass, without allocating: 6 times its size for a module's source, about
  // 18 for a literal list of small integers, 37 for as many separate arguments, up to 35
  // for numbers that simdjson prints longer than they were written (`1e14`); what it takes:
  // 3, 16, 33 and 20 times (program_parse_memory_test.cpp). A server holds this in its
  // budget while it parses, beside the parser's own buffers (about 1 MiB).
  [[nodiscard]] static std::uint64_t parse_memory_bound(std::string_view json);
  // What this program holds in memory, its strings' allocations included.
  [[nodiscard]] std::uint64_t memory_bytes() const;

  [[nodiscard]] const std::vector<Instruction>& instructions() const { return instructions_; }
  [[nodiscard]] const ProgramOptions& options() const { return options_; }
  // Distinct blob hashes the instructions reference, in first-use order.
  [[nodiscard]] const std::vector<std::string>& blobs() const { return blobs_; }
  // Canonical wire JSON of this program (what `parse` reads).
  [[nodiscard]] std::string to_json() const;

 private:
  friend class ProgramValidator;
  friend class ProgramBuilder;
  std::vector<Instruction> instructions_;
  ProgramOptions options_;
  std::vector<std::string> blobs_;
};

// Normalizes a workspace-relative path by the protocol's rules, or says why it cannot.
[[nodiscard]] Result<std::string> normalize_workspace_path(std::string_view path);

// Fails when two canonical upload paths are equal or one is a directory of the other.
[[nodiscard]] Status check_path_collisions(std::vector<std::string_view> paths);

}  // namespace kcoral
