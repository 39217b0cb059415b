// Program vocabulary (dtypes, ops) and the canonical wire form of a Program.
#include <array>
#include <nlohmann/json.hpp>

#include "kcoral/program.hpp"

namespace kcoral {
namespace {

struct DtypeRow {
  Dtype dtype;
  std::string_view wire;
  std::size_t item_size;
};

constexpr std::array<DtypeRow, 12> kDtypes{{
    {Dtype::bool_, "bool", 1},
    {Dtype::uint8, "uint8", 1},
    {Dtype::int8, "int8", 1},
    {Dtype::float8_e4m3fn, "float8_e4m3fn", 1},
    {Dtype::float8_e5m2, "float8_e5m2", 1},
    {Dtype::int16, "int16", 2},
    {Dtype::float16, "float16", 2},
    {Dtype::bfloat16, "bfloat16", 2},
    {Dtype::int32, "int32", 4},
    {Dtype::float32, "float32", 4},
    {Dtype::int64, "int64", 8},
    {Dtype::float64, "float64", 8},
}};

nlohmann::json reference(const Ref& ref) { return {{"$ref", ref.id}}; }

nlohmann::json to_json_object(const Upload& upload) {
  nlohmann::json out{{"op", "upload"}, {"kind", to_wire(upload.kind)}};
  if (!upload.id.empty()) out["id"] = upload.id;
  switch (upload.kind) {
    case UploadKind::module:
      out["source"] = upload.source;
      if (upload.language == ModuleLanguage::cuda) out["language"] = "cuda";
      break;
    case UploadKind::tensor: {
      out["blob"] = upload.blob;
      out["dtype"] = to_wire(upload.dtype);
      out["shape"] = upload.shape;
      break;
    }
    case UploadKind::file:
      out["blob"] = upload.blob;
      out["path"] = upload.path;
      break;
    case UploadKind::bytes:
    case UploadKind::library:
      out["blob"] = upload.blob;
      break;
  }
  return out;
}

nlohmann::json to_json_object(const GetFunction& get) {
  nlohmann::json out{
      {"op", "get_function"}, {"id", get.id}, {"module", reference(get.module)}, {"name", get.name}};
  if (get.cpu_only) out["cpu_only"] = true;
  return out;
}

nlohmann::json to_json_object(const Run& run) {
  nlohmann::json args = nlohmann::json::array();
  for (const Argument& arg : run.args) {
    if (const Ref* ref = std::get_if<Ref>(&arg)) args.push_back(reference(*ref));
    else args.push_back(nlohmann::json::parse(std::get<JsonLiteral>(arg).json));
  }
  return {{"op", "run"}, {"id", run.id}, {"fn", reference(run.fn)}, {"args", std::move(args)}};
}

nlohmann::json to_json_object(const ReturnValue& ret) {
  return {{"op", "return"}, {"key", ret.key}, {"value", reference(ret.value)}};
}

nlohmann::json to_json_object(const ReturnPath& ret) {
  nlohmann::json out{{"op", "return"},
                          {"key", ret.key},
                          {"kind", ret.kind == PathKind::file ? "file" : "folder"}};
  if (const Ref* ref = std::get_if<Ref>(&ret.path)) out["path"] = reference(*ref);
  else out["path"] = std::get<std::string>(ret.path);
  return out;
}

}  // namespace

std::string_view to_wire(Dtype dtype) {
  for (const DtypeRow& row : kDtypes) {
    if (row.dtype == dtype) return row.wire;
  }
  return "float32";
}

std::optional<Dtype> dtype_from_wire(std::string_view text) {
  for (const DtypeRow& row : kDtypes) {
    if (row.wire == text) return row.dtype;
  }
  return std::nullopt;
}

std::size_t item_size(Dtype dtype) {
  for (const DtypeRow& row : kDtypes) {
    if (row.dtype == dtype) return row.item_size;
  }
  return 4;
}

std::string_view to_wire(UploadKind kind) {
  switch (kind) {
    case UploadKind::module: return "module";
    case UploadKind::tensor: return "tensor";
    case UploadKind::bytes: return "bytes";
    case UploadKind::file: return "file";
    case UploadKind::library: return "library";
  }
  return "module";
}

std::string_view op_name(const Instruction& instruction) {
  switch (instruction.index()) {
    case 0: return "upload";
    case 1: return "get_function";
    case 2: return "run";
    default: return "return";
  }
}

std::optional<std::string_view> instruction_id(const Instruction& instruction) {
  return std::visit(
      [](const auto& i) -> std::optional<std::string_view> {
        if constexpr (requires { i.id; }) {
          if (!i.id.empty()) return std::string_view(i.id);
        }
        return std::nullopt;
      },
      instruction);
}

std::string Program::to_json() const {
  nlohmann::json instructions = nlohmann::json::array();
  for (const Instruction& instruction : instructions_)
    instructions.push_back(std::visit([](const auto& i) { return to_json_object(i); }, instruction));
  nlohmann::json program{{"instructions", std::move(instructions)}};
  nlohmann::json options = nlohmann::json::object();
  if (options_.timeout_seconds) options["timeout_seconds"] = *options_.timeout_seconds;
  if (options_.output_limit_bytes) options["output_limit_bytes"] = *options_.output_limit_bytes;
  if (options_.gpu_count) options["gpu_count"] = *options_.gpu_count;
  if (!options.empty()) program["options"] = std::move(options);
  return program.dump();
}

std::uint64_t Program::memory_bytes() const {
  // A string's own allocation, once it outgrows its inline buffer, with the allocator's
  // header and rounding.
  auto text = [](const std::string& s) -> std::uint64_t {
    return s.capacity() > std::string().capacity() ? s.capacity() + 32 : 0;
  };
  std::uint64_t bytes = sizeof(Program) + instructions_.capacity() * sizeof(Instruction) +
                        blobs_.capacity() * sizeof(std::string);
  for (const std::string& blob : blobs_) bytes += text(blob);
  for (const Instruction& instruction : instructions_) {
    if (const auto* upload = std::get_if<Upload>(&instruction)) {
      bytes += text(upload->id) + text(upload->source) + text(upload->blob) + text(upload->path) +
               upload->shape.capacity() * sizeof(std::int64_t);
    } else if (const auto* get = std::get_if<GetFunction>(&instruction)) {
      bytes += text(get->id) + text(get->module.id) + text(get->name);
    } else if (const auto* run = std::get_if<Run>(&instruction)) {
      bytes += text(run->id) + text(run->fn.id) + run->args.capacity() * sizeof(Argument);
      for (const Argument& arg : run->args)
        bytes += std::holds_alternative<Ref>(arg) ? text(std::get<Ref>(arg).id) : text(std::get<JsonLiteral>(arg).json);
    } else if (const auto* value = std::get_if<ReturnValue>(&instruction)) {
      bytes += text(value->key) + text(value->value.id);
    } else if (const auto* path = std::get_if<ReturnPath>(&instruction)) {
      bytes += text(path->key) + (std::holds_alternative<Ref>(path->path) ? text(std::get<Ref>(path->path).id)
                                                                          : text(std::get<std::string>(path->path)));
    }
  }
  return bytes;
}

}  // namespace kcoral
