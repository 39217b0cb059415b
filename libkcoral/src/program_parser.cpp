// Strict parse of the wire program (docs/protocol.md, "The request") into a Program.
//
// simdjson rejects malformed JSON, NaN/Infinity, invalid UTF-8, trailing content and
// nesting past the depth bound; this file adds what JSON itself allows but the protocol
// does not: duplicate keys, unknown or missing fields, wrong types, and the program's own
// rules (earlier references, unique ids and keys, paths, tensor metadata).
#include <simdjson.h>

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "kcoral/program.hpp"
#include "kcoral/sha256.hpp"

namespace kcoral {
namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;
using simdjson::dom::array;

// By value: simdjson_result::value_unsafe() returns into the temporary result, which a
// range-for would otherwise outlive.
array array_of(element value) { return value.get_array().value_unsafe(); }
object object_of(element value) { return value.get_object().value_unsafe(); }

std::string shown(std::string_view text) {
  constexpr std::size_t kShown = 80;
  std::string out = "'";
  out += text.substr(0, kShown);
  if (text.size() > kShown) out += "...";
  out += "'";
  return out;
}

// Rejects duplicate keys anywhere in the document; simdjson keeps them silently. An
// object's keys are sorted in a vector of views rather than put in a set: 16 bytes a key,
// where a set's node took 48 (Program::parse_memory_bound counts what this takes).
Status reject_duplicate_keys(element value) {
  if (value.is_array()) {
    for (element child : array_of(value)) {
      if (auto status = reject_duplicate_keys(child); !status) return status;
    }
  } else if (value.is_object()) {
    std::vector<std::string_view> keys;
    keys.reserve(object_of(value).size());
    for (auto field : object_of(value)) keys.push_back(field.key);
    std::sort(keys.begin(), keys.end());
    if (auto twice = std::adjacent_find(keys.begin(), keys.end()); twice != keys.end())
      return fail(ErrorKind::parse, "duplicate JSON key " + shown(*twice));
    keys = {};
    for (auto field : object_of(value)) {
      if (auto status = reject_duplicate_keys(field.value); !status) return status;
    }
  }
  return {};
}

// A reference is exactly {"$ref": "<non-empty string>"}.
std::optional<std::string_view> as_reference(element value) {
  if (!value.is_object()) return std::nullopt;
  object obj = object_of(value);
  if (obj.size() != 1) return std::nullopt;
  auto target = obj.at_key("$ref");
  if (target.error() || !target.value_unsafe().is_string()) return std::nullopt;
  std::string_view id = target.value_unsafe().get_string().value_unsafe();
  if (id.empty()) return std::nullopt;
  return id;
}

// The elements of `array`: simdjson counts them up to 0xFFFFFF, and past that its size()
// stays there.
std::size_t element_count(array array) {
  std::size_t count = array.size();
  if (count < 0xFFFFFF) return count;
  count = 0;
  for ([[maybe_unused]] element item : array) ++count;
  return count;
}

// Where the string whose text starts at `from` ends: its closing quote, the first not
// escaped (after an even run of backslashes), or the text's end.
std::size_t string_end(std::string_view json, std::size_t from) {
  while (true) {
    std::size_t quote = json.find('"', from);
    if (quote == std::string_view::npos) return json.size();
    std::size_t backslashes = 0;
    while (quote - backslashes > from && json[quote - backslashes - 1] == '\\') ++backslashes;
    if (backslashes % 2 == 0) return quote;
    from = quote + 1;
  }
}

}  // namespace

class ProgramValidator {
 public:
  explicit ProgramValidator(const ProgramLimits& limits) : limits_(limits) {}

  Result<Program> run(element root) {
    if (!root.is_object()) return fail(ErrorKind::parse, "the program must be a JSON object");
    object body = object_of(root);
    if (auto status = check_fields(body, "the program", {"instructions", "options"}, {"instructions"});
        !status)
      return std::unexpected(status.error());
    if (auto options = body.at_key("options"); !options.error()) {
      KCORAL_TRY(parse_options(options.value_unsafe()));
    }
    element instructions = body.at_key("instructions").value_unsafe();
    if (!instructions.is_array() || array_of(instructions).size() == 0)
      return fail(ErrorKind::parse, "'instructions' must be a non-empty array");
    if (array_of(instructions).size() > limits_.max_instructions)
      return fail(ErrorKind::parse, "the program has more than " +
                                        std::to_string(limits_.max_instructions) +
                                        " instructions");
    program_.instructions_.reserve(array_of(instructions).size());
    std::size_t index = 0;
    for (element item : array_of(instructions)) {
      if (auto status = parse_instruction(item); !status)
        return fail(ErrorKind::parse, "instruction " + std::to_string(index) + ": " +
                                          status.error().message);
      ++index;
    }
    std::vector<std::string_view> paths;
    for (const Instruction& instruction : program_.instructions_) {
      if (auto* upload = std::get_if<Upload>(&instruction); upload && upload->kind == UploadKind::file)
        paths.push_back(upload->path);
    }
    KCORAL_TRY(check_path_collisions(std::move(paths)));
    return std::move(program_);
  }

 private:
  Status check_fields(object obj, std::string_view what,
                      std::initializer_list<std::string_view> allowed,
                      std::initializer_list<std::string_view> required) {
    for (auto field : obj) {
      bool known = false;
      for (std::string_view name : allowed) known = known || field.key == name;
      if (!known)
        return fail(ErrorKind::parse, std::string(what) + " has the unknown field " + shown(field.key));
    }
    for (std::string_view name : required) {
      if (obj.at_key(name).error())
        return fail(ErrorKind::parse, std::string(what) + " is missing the field '" +
                                          std::string(name) + "'");
    }
    return {};
  }

  Status parse_options(element value) {
    if (!value.is_object()) return fail(ErrorKind::parse, "'options' must be an object");
    object options = object_of(value);
    if (auto status =
            check_fields(options, "'options'", {"timeout_seconds", "output_limit_bytes", "gpu_count"}, {});
        !status)
      return status;
    if (auto timeout = options.at_key("timeout_seconds"); !timeout.error()) {
      element t = timeout.value_unsafe();
      if (!t.is_number())
        return fail(ErrorKind::parse, "'timeout_seconds' must be a positive number");
      double seconds = t.get_double().value_unsafe();
      if (!(seconds > 0)) return fail(ErrorKind::parse, "'timeout_seconds' must be a positive number");
      program_.options_.timeout_seconds = seconds;
    }
    if (auto limit = options.at_key("output_limit_bytes"); !limit.error()) {
      element l = limit.value_unsafe();
      if (l.type() == element_type::INT64 && l.get_int64().value_unsafe() >= 0)
        program_.options_.output_limit_bytes = l.get_uint64().value_unsafe();
      else if (l.type() == element_type::UINT64)
        program_.options_.output_limit_bytes = l.get_uint64().value_unsafe();
      else
        return fail(ErrorKind::parse, "'output_limit_bytes' must be an integer >= 0");
    }
    if (auto count = options.at_key("gpu_count"); !count.error()) {
      element c = count.value_unsafe();
      std::uint64_t value = 0;  // not an integer, or not positive
      if (c.type() == element_type::INT64)
        value = static_cast<std::uint64_t>(std::max<std::int64_t>(0, c.get_int64().value_unsafe()));
      else if (c.type() == element_type::UINT64)
        value = c.get_uint64().value_unsafe();
      if (value < 1 || value > kMaxGpuCount)
        return fail(ErrorKind::parse, "'gpu_count' must be an integer between 1 and " + std::to_string(kMaxGpuCount));
      program_.options_.gpu_count = static_cast<std::uint32_t>(value);
    }
    return {};
  }

  Status parse_instruction(element item) {
    if (!item.is_object()) return fail(ErrorKind::parse, "an instruction must be an object");
    object obj = object_of(item);
    auto op_field = obj.at_key("op");
    if (op_field.error() || !op_field.value_unsafe().is_string())
      return fail(ErrorKind::parse, "the field 'op' must be one of upload, get_function, run, return");
    std::string_view op = op_field.value_unsafe().get_string().value_unsafe();
    if (op == "return") return parse_return(obj);
    if (op != "upload" && op != "get_function" && op != "run")
      return fail(ErrorKind::parse, "unknown op " + shown(op) +
                                        " (expected upload, get_function, run or return)");
    if (op == "upload") return parse_upload(obj);
    Result<std::string> id = read_new_id(obj, /*required=*/true);
    if (!id) return std::unexpected(id.error());
    return op == "get_function" ? parse_get_function(obj, std::move(*id))
                                : parse_run(obj, std::move(*id));
  }

  Result<std::string> read_new_id(object obj, bool required) {
    auto field = obj.at_key("id");
    if (field.error()) {
      if (required) return fail(ErrorKind::parse, "the field 'id' is missing");
      return std::string();
    }
    if (!field.value_unsafe().is_string())
      return fail(ErrorKind::parse, "'id' must be a non-empty string");
    std::string_view id = field.value_unsafe().get_string().value_unsafe();
    if (id.empty()) return fail(ErrorKind::parse, "'id' must be a non-empty string");
    if (id.size() > limits_.max_id_bytes)
      return fail(ErrorKind::parse, "'id' is longer than " + std::to_string(limits_.max_id_bytes) +
                                        " bytes");
    if (kinds_.contains(std::string(id)))
      return fail(ErrorKind::parse, "duplicate instruction id " + shown(id));
    return std::string(id);
  }

  Result<std::string> read_string(object obj, std::string_view name, bool non_empty) {
    element value = obj.at_key(name).value_unsafe();  // presence checked by check_fields
    if (!value.is_string() || (non_empty && value.get_string().value_unsafe().empty()))
      return fail(ErrorKind::parse, "'" + std::string(name) + "' must be a " +
                                        (non_empty ? "non-empty " : "") + "string");
    return std::string(value.get_string().value_unsafe());
  }

  Result<std::string> read_blob(object obj) {
    element value = obj.at_key("blob").value_unsafe();
    if (!value.is_string() || !is_sha256_hex(value.get_string().value_unsafe()))
      return fail(ErrorKind::parse, "'blob' must be a lowercase hex SHA-256 digest");
    std::string hash(value.get_string().value_unsafe());
    if (blobs_seen_.insert(hash).second) program_.blobs_.push_back(hash);
    return hash;
  }

  // Resolves a reference field; `what` names the field in messages.
  Result<Ref> read_reference(element value, std::string_view what) {
    std::optional<std::string_view> target = as_reference(value);
    if (!target) return fail(ErrorKind::parse, std::string(what) + " must be {\"$ref\": \"<id>\"}");
    if (!kinds_.contains(std::string(*target)))
      return fail(ErrorKind::parse, std::string(what) + " references " + shown(*target) +
                                        ", which is not the id of an earlier instruction");
    return Ref{std::string(*target)};
  }

  Status add(Instruction instruction, std::string_view kind) {
    if (std::optional<std::string_view> id = instruction_id(instruction))
      kinds_.emplace(std::string(*id), std::string(kind));
    program_.instructions_.push_back(std::move(instruction));
    return {};
  }

  Status parse_upload(object obj) {
    auto kind_field = obj.at_key("kind");
    std::string_view kind =
        kind_field.error() || !kind_field.value_unsafe().is_string()
            ? std::string_view()
            : kind_field.value_unsafe().get_string().value_unsafe();
    Upload upload;
    Status fields;
    if (kind == "module") {
      fields = check_fields(obj, "a module upload", {"op", "id", "kind", "source", "language"},
                            {"op", "id", "kind", "source"});
      upload.kind = UploadKind::module;
    } else if (kind == "tensor") {
      fields = check_fields(obj, "a tensor upload", {"op", "id", "kind", "blob", "dtype", "shape"},
                            {"op", "id", "kind", "blob", "dtype", "shape"});
      upload.kind = UploadKind::tensor;
    } else if (kind == "bytes" || kind == "library") {
      fields = check_fields(obj, kind == "bytes" ? "a bytes upload" : "a library upload",
                            {"op", "id", "kind", "blob"}, {"op", "id", "kind", "blob"});
      upload.kind = kind == "bytes" ? UploadKind::bytes : UploadKind::library;
    } else if (kind == "file") {
      fields = check_fields(obj, "a file upload", {"op", "id", "kind", "blob", "path"},
                            {"op", "kind", "blob", "path"});
      upload.kind = UploadKind::file;
    } else {
      return fail(ErrorKind::parse, "upload 'kind' must be one of module, tensor, bytes, file, "
                                    "library, not " + (kind.empty() ? std::string("missing") : shown(kind)));
    }
    if (!fields) return fields;
    Result<std::string> id = read_new_id(obj, upload.kind != UploadKind::file);
    if (!id) return std::unexpected(id.error());
    upload.id = std::move(*id);

    if (upload.kind == UploadKind::module) {
      Result<std::string> source = read_string(obj, "source", false);
      if (!source) return std::unexpected(source.error());
      upload.source = std::move(*source);
      if (auto language = obj.at_key("language"); !language.error()) {
        element l = language.value_unsafe();
        std::string_view text = l.is_string() ? l.get_string().value_unsafe() : "";
        if (text == "python") upload.language = ModuleLanguage::python;
        else if (text == "cuda") upload.language = ModuleLanguage::cuda;
        else return fail(ErrorKind::parse, "'language' must be \"python\" or \"cuda\"");
      }
      return add(std::move(upload), "module");
    }
    Result<std::string> blob = read_blob(obj);
    if (!blob) return std::unexpected(blob.error());
    upload.blob = std::move(*blob);
    if (upload.kind == UploadKind::file) {
      element path = obj.at_key("path").value_unsafe();
      if (!path.is_string()) return fail(ErrorKind::parse, "'path' must be a non-empty string");
      Result<std::string> normalized = normalize_workspace_path(path.get_string().value_unsafe());
      if (!normalized) return std::unexpected(normalized.error());
      upload.path = std::move(*normalized);
      return add(std::move(upload), "file");
    }
    if (upload.kind == UploadKind::tensor) {
      if (auto status = parse_tensor_metadata(obj, upload); !status) return status;
    }
    std::string_view names = upload.kind == UploadKind::library ? "library" : "value";
    return add(std::move(upload), names);
  }

  Status parse_tensor_metadata(object obj, Upload& upload) {
    element dtype = obj.at_key("dtype").value_unsafe();
    std::optional<Dtype> parsed =
        dtype.is_string() ? dtype_from_wire(dtype.get_string().value_unsafe()) : std::nullopt;
    if (!parsed)
      return fail(ErrorKind::parse, "unsupported tensor dtype; expected one of bool uint8 int8 "
                                    "float8_e4m3fn float8_e5m2 int16 float16 bfloat16 int32 "
                                    "float32 int64 float64");
    upload.dtype = *parsed;
    element shape = obj.at_key("shape").value_unsafe();
    if (!shape.is_array()) return fail(ErrorKind::parse, "'shape' must be an array of integers >= 0");
    if (array_of(shape).size() > limits_.max_shape_rank)
      return fail(ErrorKind::parse, "'shape' has more than " + std::to_string(limits_.max_shape_rank) +
                                        " dimensions");
    for (element dim : array_of(shape)) {
      if (dim.type() != element_type::INT64 || dim.get_int64().value_unsafe() < 0)
        return fail(ErrorKind::parse, "'shape' must be an array of integers >= 0");
      upload.shape.push_back(dim.get_int64().value_unsafe());
    }
    // A zero extent anywhere makes an empty tensor, however large the others are.
    if (std::find(upload.shape.begin(), upload.shape.end(), 0) != upload.shape.end()) return {};
    std::uint64_t bytes = item_size(upload.dtype);
    for (std::int64_t extent : upload.shape) {
      if (bytes > limits_.max_tensor_bytes / static_cast<std::uint64_t>(extent))
        return fail(ErrorKind::parse, "the tensor's shape describes more than " +
                                          std::to_string(limits_.max_tensor_bytes) + " bytes");
      bytes *= static_cast<std::uint64_t>(extent);
    }
    return {};
  }

  Status parse_get_function(object obj, std::string id) {
    if (auto status = check_fields(obj, "get_function", {"op", "id", "module", "name", "cpu_only"},
                                   {"op", "id", "module", "name"});
        !status)
      return status;
    GetFunction get{std::move(id), {}, {}, false};
    Result<Ref> module = read_reference(obj.at_key("module").value_unsafe(), "'module'");
    if (!module) return std::unexpected(module.error());
    get.module = std::move(*module);
    Result<std::string> name = read_string(obj, "name", true);
    if (!name) return std::unexpected(name.error());
    get.name = std::move(*name);
    if (auto cpu_only = obj.at_key("cpu_only"); !cpu_only.error()) {
      if (!cpu_only.value_unsafe().is_bool())
        return fail(ErrorKind::parse, "'cpu_only' must be true or false");
      get.cpu_only = cpu_only.value_unsafe().get_bool().value_unsafe();
    }
    return add(std::move(get), "function");
  }

  Status parse_run(object obj, std::string id) {
    if (auto status = check_fields(obj, "run", {"op", "id", "fn", "args"}, {"op", "id", "fn"});
        !status)
      return status;
    Run run{std::move(id), {}, {}};
    Result<Ref> fn = read_reference(obj.at_key("fn").value_unsafe(), "'fn'");
    if (!fn) return std::unexpected(fn.error());
    run.fn = std::move(*fn);
    if (auto args = obj.at_key("args"); !args.error()) {
      if (!args.value_unsafe().is_array()) return fail(ErrorKind::parse, "'args' must be an array");
      run.args.reserve(element_count(array_of(args.value_unsafe())));  // no growth: a run may have millions
      for (element arg : array_of(args.value_unsafe())) {
        // Only a top-level argument that is exactly a reference is resolved; anything
        // else, references nested in containers included, is a literal.
        if (as_reference(arg)) {
          Result<Ref> ref = read_reference(arg, "an argument");
          if (!ref) return std::unexpected(ref.error());
          run.args.emplace_back(std::move(*ref));
        } else {
          run.args.emplace_back(JsonLiteral{simdjson::minify(arg)});
        }
      }
    }
    return add(std::move(run), "value");
  }

  Status parse_return(object obj) {
    bool is_path = !obj.at_key("kind").error();
    Status fields = is_path ? check_fields(obj, "return", {"op", "key", "kind", "path"},
                                           {"op", "key", "kind", "path"})
                            : check_fields(obj, "return", {"op", "key", "value"}, {"op", "key", "value"});
    if (!fields) return fields;
    Result<std::string> key = read_string(obj, "key", true);
    if (!key) return std::unexpected(key.error());
    if (!return_keys_.insert(*key).second)
      return fail(ErrorKind::parse, "duplicate return key " + shown(*key));
    if (!is_path) {
      Result<Ref> value = read_reference(obj.at_key("value").value_unsafe(), "'value'");
      if (!value) return std::unexpected(value.error());
      return add(ReturnValue{std::move(*key), std::move(*value)}, "");
    }
    ReturnPath ret{std::move(*key), PathKind::file, std::string()};
    element kind = obj.at_key("kind").value_unsafe();
    std::string_view kind_text = kind.is_string() ? kind.get_string().value_unsafe() : "";
    if (kind_text == "file") ret.kind = PathKind::file;
    else if (kind_text == "folder") ret.kind = PathKind::folder;
    else return fail(ErrorKind::parse, "return 'kind' must be \"file\" or \"folder\"");
    element path = obj.at_key("path").value_unsafe();
    if (as_reference(path)) {
      Result<Ref> ref = read_reference(path, "'path'");
      if (!ref) return std::unexpected(ref.error());
      ret.path = std::move(*ref);
    } else if (path.is_string()) {
      Result<std::string> normalized = normalize_workspace_path(path.get_string().value_unsafe());
      if (!normalized) return std::unexpected(normalized.error());
      ret.path = std::move(*normalized);
    } else {
      return fail(ErrorKind::parse, "'path' must be a path string or {\"$ref\": \"<id>\"}");
    }
    return add(std::move(ret), "");
  }

  const ProgramLimits& limits_;
  Program program_;
  std::unordered_map<std::string, std::string> kinds_;  // id -> what it names
  std::unordered_set<std::string> return_keys_;
  std::unordered_set<std::string> blobs_seen_;  // program_.blobs_, to look up (it keeps their order)
};

Result<Program> Program::parse(std::string_view json, const ProgramLimits& limits) {
  if (json.size() > limits.max_program_bytes)
    return fail(ErrorKind::parse, "the program is larger than " +
                                      std::to_string(limits.max_program_bytes) + " bytes");
  simdjson::dom::parser parser;
  if (auto error = parser.allocate(json.size(), limits.max_depth))
    return fail(ErrorKind::parse, std::string("cannot parse the program: ") +
                                      simdjson::error_message(error));
  simdjson::dom::element root;
  if (auto error = parser.parse(json.data(), json.size()).get(root)) {
    std::string message = "malformed JSON in the program: ";
    if (error == simdjson::DEPTH_ERROR)
      message += "nested deeper than " + std::to_string(limits.max_depth) + " levels";
    else if (error == simdjson::NUMBER_ERROR)
      message += "a number is malformed or out of range (integers must fit in 64 bits, other "
                 "numbers in a double; pass larger integers as strings)";
    else
      message += simdjson::error_message(error);
    return fail(ErrorKind::parse, message);
  }
  KCORAL_TRY(reject_duplicate_keys(root));
  return ProgramValidator(limits).run(root);
}

// Counted from the text's tokens, in the order parse takes memory: simdjson's padded copy
// of the text, its structural index (4 bytes a token or punctuation), its tape (two words
// a number or container, one a string) and string buffer; the duplicate-key check's views;
// then the program built of it, whose instructions and arguments are the costly parts:
// each element of the instructions array (nesting 2) an Instruction and the validator's
// entries, each element of a run's `args` (nesting 4) an Argument. What is charged at
// those nestings elsewhere (options, a `$ref` object's key) only makes the bound looser.
std::uint64_t Program::parse_memory_bound(std::string_view json) {
  constexpr std::uint64_t kPunctuation = 4;                   // `,` `:` `]` `}`: an index entry
  constexpr std::uint64_t kValue = 4 + 16;                    // a scalar or container: index, tape
  constexpr std::uint64_t kString = 4 + 8 + 5 + 16;           // index, tape, length and NUL, a key's view
  constexpr std::uint64_t kArgument = sizeof(Argument);       // its text: among the copies
  constexpr std::uint64_t kInstruction = 512;                 // its variant, the ids' tables and nodes
  constexpr std::size_t kArgumentNesting = 4, kInstructionNesting = 2;
  // The text's copies: simdjson's, its string buffer, the program's strings, and a
  // literal's minified text (built in a buffer that doubles: three times its size at most).
  constexpr std::uint64_t kCopies = 6;
  // A number with a fraction or an exponent is minified as simdjson prints a double, up to
  // this long however short it was written (`1e14` becomes `100000000000000.0`).
  constexpr std::uint64_t kPrintedDouble = 32;
  std::uint64_t bytes = kCopies * json.size();
  std::size_t nesting = 0;
  std::size_t scalar_start = 0;
  bool in_scalar = false, is_double = false;
  auto element_cost = [&]() -> std::uint64_t {
    if (nesting == kArgumentNesting) return kArgument;
    if (nesting == kInstructionNesting) return kInstruction;
    return 0;
  };
  auto end_scalar = [&](std::size_t end) {
    if (in_scalar && is_double && end - scalar_start < kPrintedDouble)
      bytes += kCopies / 2 * (kPrintedDouble - (end - scalar_start));
    in_scalar = false;
  };
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    switch (c) {
      case '"':
        end_scalar(i);
        bytes += kString + element_cost();
        i = string_end(json, i + 1);
        break;
      case '{':
      case '[':
        end_scalar(i);
        bytes += kValue + element_cost();
        ++nesting;
        break;
      case '}':
      case ']':
        end_scalar(i);
        bytes += kPunctuation;
        if (nesting > 0) --nesting;
        break;
      case ',':
      case ':':
        end_scalar(i);
        bytes += kPunctuation;
        break;
      case ' ':
      case '\t':
      case '\n':
      case '\r':
        end_scalar(i);
        break;
      default:  // a number, true, false, null, or what simdjson refuses (indexed all the same)
        if (!in_scalar) {
          bytes += kValue + element_cost();
          in_scalar = true;
          is_double = false;
          scalar_start = i;
        }
        is_double = is_double || c == '.' || c == 'e' || c == 'E';
    }
  }
  end_scalar(json.size());
  return bytes;
}

}  // namespace kcoral
