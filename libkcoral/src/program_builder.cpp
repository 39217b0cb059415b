// ProgramBuilder: instructions in C++, validated by the wire parser on build().
#include "kcoral/program_builder.hpp"

#include "kcoral/sha256.hpp"

namespace kcoral {

std::string ProgramBuilder::add_blob(std::string_view data) {
  std::string digest = sha256_hex(data);
  if (!blobs_.contains(digest)) {
    auto blob = Blob::copy_of(data);
    if (blob) blobs_.emplace(digest, std::move(*blob));
    else errors_.push_back(blob.error());
  }
  return digest;
}

namespace {

Upload upload_of(std::string id, UploadKind kind, std::string blob = {}) {
  Upload upload;
  upload.id = std::move(id);
  upload.kind = kind;
  upload.blob = std::move(blob);
  return upload;
}

}  // namespace

Ref ProgramBuilder::upload_module(std::string id, std::string source, ModuleLanguage language) {
  Upload upload = upload_of(id, UploadKind::module);
  upload.source = std::move(source);
  upload.language = language;
  instructions_.emplace_back(std::move(upload));
  return Ref{std::move(id)};
}

Ref ProgramBuilder::upload_bytes(std::string id, std::string_view data) {
  instructions_.emplace_back(upload_of(id, UploadKind::bytes, add_blob(data)));
  return Ref{std::move(id)};
}

Ref ProgramBuilder::upload_tensor(std::string id, std::string_view data, Dtype dtype,
                                  std::vector<std::int64_t> shape) {
  Upload upload = upload_of(id, UploadKind::tensor, add_blob(data));
  upload.dtype = dtype;
  upload.shape = std::move(shape);
  instructions_.emplace_back(std::move(upload));
  return Ref{std::move(id)};
}

Ref ProgramBuilder::upload_library(std::string id, std::string_view data) {
  instructions_.emplace_back(upload_of(id, UploadKind::library, add_blob(data)));
  return Ref{std::move(id)};
}

Ref ProgramBuilder::upload_file(std::string path, std::string_view data, std::string id) {
  Upload upload = upload_of(id, UploadKind::file, add_blob(data));
  upload.path = std::move(path);
  instructions_.emplace_back(std::move(upload));
  return Ref{std::move(id)};
}

Ref ProgramBuilder::get_function(std::string id, const Ref& module, std::string name, bool cpu_only) {
  instructions_.emplace_back(GetFunction{id, module, std::move(name), cpu_only});
  return Ref{std::move(id)};
}

Ref ProgramBuilder::run(std::string id, const Ref& fn, std::vector<Argument> args) {
  instructions_.emplace_back(Run{id, fn, std::move(args)});
  return Ref{std::move(id)};
}

void ProgramBuilder::return_value(std::string key, const Ref& value) {
  instructions_.emplace_back(ReturnValue{std::move(key), value});
}

void ProgramBuilder::return_file(std::string key, std::string path) {
  instructions_.emplace_back(ReturnPath{std::move(key), PathKind::file, std::move(path)});
}

void ProgramBuilder::return_folder(std::string key, std::string path) {
  instructions_.emplace_back(ReturnPath{std::move(key), PathKind::folder, std::move(path)});
}

Result<BuiltProgram> ProgramBuilder::build() const {
  if (!errors_.empty()) return std::unexpected(errors_.front());
  Program draft;
  draft.instructions_ = instructions_;
  draft.options_ = options_;
  std::string json;
  try {
    json = draft.to_json();
  } catch (const std::exception& e) {  // a JsonLiteral that is not JSON
    return fail(ErrorKind::parse, std::string("an argument is not valid JSON: ") + e.what());
  }
  auto program = Program::parse(json);
  if (!program) return std::unexpected(program.error());
  return BuiltProgram{std::move(*program), blobs_};
}

}  // namespace kcoral
