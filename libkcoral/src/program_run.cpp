// ProgramRun: instruction semantics, error kinds and lease placement (docs/protocol.md).
#include "program_run.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "output_capture.hpp"

namespace kcoral {
namespace {

using cpython::PyRef;
using cpython::PythonException;
using Json = nlohmann::ordered_json;


// A file name that is safe and still recognisable in tracebacks: "my-ops" -> "my_ops".
std::string sanitized(std::string_view id) {
  std::string out;
  for (char c : id.substr(0, 64)) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// Writes a file of the executor's own (module source, library) outside the workspace.
Status write_new_file(const std::string& path, std::string_view data) {
  UniqueFd file(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  while (file && !data.empty()) {
    ssize_t n = ::write(file.get(), data.data(), data.size());
    if (n <= 0) break;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  if (!file || !data.empty()) return fail(ErrorKind::engine, "cannot write " + path);
  return {};
}

InstructionFailure failure_from(const PythonException& e, ErrorKind kind) {
  return {kind, e.error().summary(), e.error().traceback};
}

}  // namespace

ProgramRun::ProgramRun(ExecutionContext context, const Program& program, const BlobMap& blobs,
                       GpuLease& lease, const RunOptions& options)
    : context_(context), program_(program), blobs_(blobs), lease_(lease), options_(options) {
  for (const Instruction& instruction : program.instructions()) {
    if (const auto* get = std::get_if<GetFunction>(&instruction); get && get->cpu_only)
      cpu_only_functions_.insert(get->id);
    if (const auto* upload = std::get_if<Upload>(&instruction); upload && !upload->id.empty())
      uploads_.emplace(upload->id, upload->kind);
  }
}

ProgramResult ProgramRun::execute() {
  auto started = std::chrono::steady_clock::now();
  auto workspace = Workspace::create(context_.work_root);
  auto capture = workspace ? OutputCapture::start(options_.output_limit_bytes)
                           : Result<std::unique_ptr<OutputCapture>>(std::unexpected(workspace.error()));
  if (!capture) {
    fail(0, ErrorKind::engine, capture.error().message, "");
    return std::move(result_);
  }
  workspace_ = std::move(*workspace);

  UniqueFd previous_directory(::open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  PyObject* sys_path = PySys_GetObject("path");  // borrowed
  PyRef work_dir = PyRef::steal(PyUnicode_FromString(workspace_->work_dir().c_str()));
  bool path_added = false;
  if (::chdir(workspace_->work_dir().c_str()) != 0) {
    fail(0, ErrorKind::engine, "cannot enter the working directory", "");
  } else {
    // Files a program uploads (helper packages, say) import like those beside a script.
    path_added = sys_path != nullptr && PyList_Insert(sys_path, 0, work_dir.get()) == 0;
    run_instructions();
  }
  clean_up();

  for (const char* stream : {"stdout", "stderr"}) {
    PyObject* file = PySys_GetObject(stream);
    if (file != nullptr && PyObject_CallMethod(file, "flush", nullptr) == nullptr) PyErr_Clear();
  }
  auto [out, err] = (*capture)->finish();
  if (previous_directory) (void)!::fchdir(previous_directory.get());
  if (path_added) {
    Py_ssize_t index = PySequence_Index(sys_path, work_dir.get());
    if (index >= 0) PySequence_DelItem(sys_path, index);
    PyErr_Clear();
  }
  PyObject* modules = PyImport_GetModuleDict();
  for (const std::string& name : registered_modules_) {
    if (PyDict_DelItemString(modules, name.c_str()) != 0) PyErr_Clear();
  }
  values_.clear();
  workspace_.reset();

  result_.stdout_output = {decode_output(out.bytes), out.truncated};
  result_.stderr_output = {decode_output(err.bytes), err.truncated};
  std::string json = "{";
  for (const auto& [key, text] : results_) {
    if (json.size() > 1) json += ',';
    json.append(Json(key).dump(-1, ' ', false, Json::error_handler_t::replace)).append(":").append(text);
  }
  std::uint64_t part_bytes = parts_.bytes();
  std::size_t part_count = parts_.count();
  if (auto parts = parts_.finish()) {
    result_.parts = std::move(*parts);
    result_.results_json = json + "}";
  } else {
    // The values name parts that are lost (a program that left itself no address space to
    // map them, say): none of the values is returned, and the program fails.
    result_.results_json = "{}";
    if (!result_.error)
      fail(current_, ErrorKind::serialization,
           "the returned binary data (" + std::to_string(part_bytes) + " bytes in " + std::to_string(part_count) +
               " parts) cannot be kept: " + parts.error().message + "; no value is returned",
           "");
  }
  result_.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return std::move(result_);
}

void ProgramRun::run_instructions() {
  const std::vector<Instruction>& instructions = program_.instructions();
  for (current_ = 0; current_ < instructions.size(); ++current_) {
    if (options_.on_instruction) options_.on_instruction(current_);
    try {
      prepare(instructions[current_]);
      place_lease(instructions[current_]);
      std::visit([this](const auto& instruction) { execute(instruction); }, instructions[current_]);
    } catch (const InstructionFailure& failure) {
      fail(current_, failure.kind, failure.message, failure.traceback);
      result_.error->gpu_access = failure.gpu_access;
    } catch (const PythonException& e) {
      fail(current_, ErrorKind::runtime, e.error().summary(), e.error().traceback);
    } catch (const std::exception& e) {
      fail(current_, ErrorKind::engine, e.what(), "");
    }
    if (result_.error) return;
  }
  current_ = instructions.empty() ? 0 : instructions.size() - 1;
}

void ProgramRun::prepare(const Instruction& instruction) {
  const auto* upload = std::get_if<Upload>(&instruction);
  if (upload == nullptr) return;
  if (upload->kind == UploadKind::module && upload->language == ModuleLanguage::python) {
    std::string path = own_file_path(upload->id, ".py");
    if (auto written = write_new_file(path, upload->source); !written)
      throw InstructionFailure{ErrorKind::engine, written.error().message, ""};
    try {
      prepared_[upload->id] = {path, KCORAL_PY_CHECK(PyObject_CallMethod(
                                         context_.support, "compile_module", "s#s#", path.data(),
                                         static_cast<Py_ssize_t>(path.size()), upload->source.data(),
                                         static_cast<Py_ssize_t>(upload->source.size())))};
    } catch (const PythonException& e) {
      throw failure_from(e, ErrorKind::parse);
    }
  } else if (upload->kind == UploadKind::library) {
    std::string path = own_file_path(upload->id, ".so");
    if (auto written = write_new_file(path, blob(upload->blob).view()); !written)
      throw InstructionFailure{ErrorKind::engine, written.error().message, ""};
    prepared_[upload->id] = {path, PyRef()};
  }
}

void ProgramRun::place_lease(const Instruction& instruction) {
  if (!lease_.has_gpu()) return;
  bool off_gpu = false;
  if (const auto* upload = std::get_if<Upload>(&instruction)) {
    if (upload->kind == UploadKind::bytes) return;
    off_gpu = upload->kind == UploadKind::file;
  } else if (std::holds_alternative<ReturnPath>(instruction)) {
    off_gpu = true;
  } else if (const auto* run = std::get_if<Run>(&instruction)) {
    off_gpu = cpu_only_functions_.contains(run->fn.id);
  }
  if (off_gpu) {
    drop_lease();
  } else if (auto status = take_lease(); !status) {
    throw InstructionFailure{ErrorKind::engine, "cannot take the GPU lease: " + status.error().message, ""};
  }
}

Status ProgramRun::take_lease() {
  if (lease_.held()) return {};
  auto asked = std::chrono::steady_clock::now();
  Status status = lease_.acquire();
  held_since_ = std::chrono::steady_clock::now();
  result_.lease_wait_ms += std::chrono::duration<double, std::milli>(held_since_ - asked).count();
  return status;
}

void ProgramRun::give_lease_back() {
  if (!lease_.held()) return;
  lease_.release();
  result_.lease_held_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - held_since_).count();
}

void ProgramRun::drop_lease() {
  if (!lease_.held()) return;
  // Hand over an idle GPU: whatever this program queued must finish on its own time.
  if (auto status = context_.device.synchronize(); !status)
    throw InstructionFailure{ErrorKind::runtime, status.error().message, ""};
  give_lease_back();
}

void ProgramRun::clean_up() {
  if (!lease_.has_gpu()) return;
  std::optional<Error> problem;
  if (auto status = take_lease(); !status) {
    problem = status.error();
  } else if (auto synced = context_.device.synchronize(); !synced) {
    problem = synced.error();
    result_.device_lost = true;  // a sticky error: this context is done for
  } else if (auto pending = context_.device.take_last_error()) {
    problem = Error{ErrorKind::runtime, *pending};
  }
  give_lease_back();
  if (problem && !result_.error) fail(current_, ErrorKind::runtime, problem->message, "");
}

void ProgramRun::execute(const Upload& upload) {
  switch (upload.kind) {
    case UploadKind::module:
      if (upload.language == ModuleLanguage::cuda) {
        // Kept as text: get_function hands it to the program's own compiler code.
        values_[upload.id] = KCORAL_PY_CHECK(PyUnicode_FromStringAndSize(
            upload.source.data(), static_cast<Py_ssize_t>(upload.source.size())));
        module_sources_[upload.id] = upload.source;
      } else {
        values_[upload.id] = load_module(upload);
      }
      return;
    case UploadKind::bytes: {
      const Blob& data = blob(upload.blob);
      PyRef bytes = KCORAL_PY_CHECK(PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(data.size())));
      auto* start = reinterpret_cast<std::byte*>(PyBytes_AS_STRING(bytes.get()));
      if (auto copied = data.copy_to({start, data.size()}); !copied)
        throw InstructionFailure{ErrorKind::engine, copied.error().message, ""};
      if (data.size() >= BlobBuilder::kHashAlongsideBytes) uploaded_bytes_[start] = {data, upload.blob};
      values_[upload.id] = std::move(bytes);
      return;
    }
    case UploadKind::tensor:
      try {
        values_[upload.id] = context_.device.make_tensor(blob(upload.blob), upload);
      } catch (const PythonException& e) {
        bool missing_package = error_kind_from_wire(e.error().declared_kind) == ErrorKind::unavailable;
        throw failure_from(e, missing_package ? ErrorKind::unavailable : ErrorKind::runtime);
      }
      return;
    case UploadKind::file:
      if (auto status = workspace_->write_file(upload.path, blob(upload.blob).view()); !status)
        throw InstructionFailure{status.error().kind, status.error().message, ""};
      if (!upload.id.empty())
        values_[upload.id] = KCORAL_PY_CHECK(PyUnicode_FromStringAndSize(
            upload.path.data(), static_cast<Py_ssize_t>(upload.path.size())));
      return;
    case UploadKind::library:
      try {
        values_[upload.id] = context_.device.load_library(prepared_.extract(upload.id).mapped().path);
      } catch (const PythonException& e) {
        throw failure_from(e, ErrorKind::compile);
      }
      return;
  }
}

std::string ProgramRun::own_file_path(const std::string& id, const char* extension) const {
  std::string stem = workspace_->modules_dir() + "/" + sanitized(id);
  std::string path = stem + extension;
  for (int n = 2; ::access(path.c_str(), F_OK) == 0; ++n) path = stem + "_" + std::to_string(n) + extension;
  return path;
}

PyRef ProgramRun::load_module(const Upload& upload) {
  auto [path, code] = std::move(prepared_.extract(upload.id).mapped());
  std::string name =
      kUploadedModulePrefix + std::to_string(++context_.modules_loaded) + "_" + sanitized(upload.id);
  registered_modules_.push_back(name);
  try {
    return KCORAL_PY_CHECK(PyObject_CallMethod(context_.support, "load_module", "s#s#O", name.data(),
                                               static_cast<Py_ssize_t>(name.size()), path.data(),
                                               static_cast<Py_ssize_t>(path.size()), code.get()));
  } catch (const PythonException& e) {
    throw failure_from(e, ErrorKind::parse);
  }
}

void ProgramRun::execute(const GetFunction& get) {
  PyObject* module = value(get.module);
  auto upload = uploads_.find(get.module.id);
  if (upload == uploads_.end() ||
      (upload->second != UploadKind::module && upload->second != UploadKind::library))
    throw InstructionFailure{ErrorKind::unavailable, "get_function needs a module or library upload; '" +
                                                         get.module.id + "' is not one", ""};
  if (auto source = module_sources_.find(get.module.id); source != module_sources_.end()) {
    values_[get.id] = KCORAL_PY_CHECK(PyObject_CallMethod(
        context_.support, "cuda_source", "Os#", module, get.name.data(),
        static_cast<Py_ssize_t>(get.name.size())));
    return;
  }
  if (!PyModule_Check(module)) {
    try {
      values_[get.id] = context_.device.library_function(module, get.name);
    } catch (const PythonException& e) {
      throw failure_from(e, ErrorKind::compile);
    }
    return;
  }
  PyObject* function = PyObject_GetAttrString(module, get.name.c_str());
  if (function == nullptr) {
    PyErr_Clear();
    throw InstructionFailure{ErrorKind::parse, "the module uploaded as '" + get.module.id +
                                                   "' defines no name '" + get.name + "'", ""};
  }
  values_[get.id] = PyRef::steal(function);
}

void ProgramRun::execute(const Run& run) {
  PyObject* function = value(run.fn);
  if (!PyCallable_Check(function))
    throw InstructionFailure{ErrorKind::runtime, "'" + run.fn.id + "' is not callable (it is a " +
                                                     Py_TYPE(function)->tp_name + ")", ""};
  PyRef json = KCORAL_PY_CHECK(PyImport_ImportModule("json"));
  PyRef args = KCORAL_PY_CHECK(PyTuple_New(static_cast<Py_ssize_t>(run.args.size())));
  for (std::size_t i = 0; i < run.args.size(); ++i) {
    PyRef arg = std::holds_alternative<Ref>(run.args[i])
                    ? PyRef::borrow(value(std::get<Ref>(run.args[i])))
                    : KCORAL_PY_CHECK(PyObject_CallMethod(json.get(), "loads", "s",
                                                          std::get<JsonLiteral>(run.args[i]).json.c_str()));
    PyTuple_SET_ITEM(args.get(), static_cast<Py_ssize_t>(i), arg.release());
  }
  std::unique_ptr<CpuOnlyWatch> watch;
  if (cpu_only_functions_.contains(run.fn.id))
    watch = context_.device.watch_cpu_only(workspace_->modules_dir(), options_.on_gpu_access);
  PyObject* result = PyObject_Call(function, args.get(), nullptr);
  if (watch) {
    // Using the GPU without the lease is the first fault, whatever happened after it.
    if (auto verdict = watch->verdict()) {
      Py_XDECREF(result);
      PyErr_Clear();
      throw std::move(*verdict);
    }
  }
  if (result == nullptr) {
    cpython::PythonError error = cpython::fetch_python_error();
    // An assert in the uploaded code (or torch.testing.assert_close) is a failed check.
    ErrorKind kind = error.is_assertion ? ErrorKind::correctness : ErrorKind::runtime;
    if (auto declared = error_kind_from_wire(error.declared_kind); declared && is_program_kind(*declared))
      kind = *declared;
    throw InstructionFailure{kind, error.summary(), error.traceback};
  }
  values_[run.id] = PyRef::steal(result);
}

void ProgramRun::execute(const ReturnValue& ret) {
  // The encoder is Python in the program's own process, which the program may have patched:
  // what it gives is checked before it is used.
  auto malformed = [](const char* what) {
    return InstructionFailure{ErrorKind::serialization,
                              std::string("the worker's value encoder gave ") + what + "; was it replaced?", ""};
  };
  // Parts stored for a return that then fails are dropped again: every part the response
  // carries is named by a returned value.
  struct Rollback {
    BlobBuilder& parts;
    std::size_t count;
    bool done = false;
    ~Rollback() {
      if (!done) parts.drop_from(count);
    }
  } rollback{parts_, parts_.count()};
  try {
    // (binary parts, a function of their digests that gives the JSON text)
    PyRef encoded = KCORAL_PY_CHECK(PyObject_CallMethod(
        context_.support, "encode_value", "Os#nK", value(ret.value), ret.key.data(),
        static_cast<Py_ssize_t>(ret.key.size()), static_cast<Py_ssize_t>(parts_.count()),
        static_cast<unsigned long long>(options_.max_returned_bytes - parts_.bytes())));
    if (!PyTuple_Check(encoded.get()) || PyTuple_GET_SIZE(encoded.get()) != 2 ||
        !PyCallable_Check(PyTuple_GET_ITEM(encoded.get(), 1)))
      throw malformed("no (parts, text function) pair");
    // A tuple of the parts: what the program's threads do to the encoder's list meanwhile
    // changes nothing here.
    PyRef binaries = KCORAL_PY_CHECK(PySequence_Tuple(PyTuple_GET_ITEM(encoded.get(), 0)));
    Py_ssize_t count = PyTuple_GET_SIZE(binaries.get());
    std::vector<cpython::BufferView> views(static_cast<std::size_t>(count));
    std::vector<std::span<const std::byte>> pieces;
    for (Py_ssize_t i = 0; i < count; ++i) {
      cpython::BufferView& view = views[static_cast<std::size_t>(i)];
      KCORAL_PY_CHECK(view.acquire(PyTuple_GET_ITEM(binaries.get(), i), PyBUF_C_CONTIGUOUS));
      pieces.push_back(view.bytes());
    }
    PyRef digests = KCORAL_PY_CHECK(PyList_New(count));
    for (std::size_t i = 0; const std::string& digest : store_binary_parts(pieces))
      PyList_SET_ITEM(digests.get(), static_cast<Py_ssize_t>(i++),
                      KCORAL_PY_CHECK(PyUnicode_FromStringAndSize(digest.data(), 64)).release());
    PyRef text = KCORAL_PY_CHECK(PyObject_CallOneArg(PyTuple_GET_ITEM(encoded.get(), 1), digests.get()));
    if (!PyBytes_Check(text.get())) throw malformed("a JSON text that is not bytes");
    keep_returned(ret.key, std::string(PyBytes_AS_STRING(text.get()), PyBytes_GET_SIZE(text.get())));
    rollback.done = true;
  } catch (const PythonException& e) {
    auto declared = error_kind_from_wire(e.error().declared_kind);
    if (declared == ErrorKind::response_too_large)
      throw InstructionFailure{ErrorKind::response_too_large, e.error().message, ""};
    bool ours = declared == ErrorKind::serialization;
    throw InstructionFailure{ErrorKind::serialization, ours ? e.error().message : e.error().summary(),
                             ours ? "" : e.error().traceback};
  }
}

void ProgramRun::execute(const ReturnPath& ret) {
  std::string raw;
  if (const Ref* ref = std::get_if<Ref>(&ret.path)) {
    PyObject* path = PyOS_FSPath(value(*ref));
    if (path == nullptr || !PyUnicode_Check(path)) {
      Py_XDECREF(path);
      PyErr_Clear();
      throw InstructionFailure{ErrorKind::serialization,
                               "'" + ref->id + "' does not hold a path (a str or os.PathLike)", ""};
    }
    const char* utf8 = PyUnicode_AsUTF8(path);
    if (utf8 == nullptr) PyErr_Clear();
    raw = utf8 != nullptr ? utf8 : "";
    Py_DECREF(path);
  } else {
    raw = std::get<std::string>(ret.path);
  }
  auto path = normalize_workspace_path(raw);
  if (!path) throw InstructionFailure{ErrorKind::serialization, "cannot return '" + raw + "': " +
                                                                    path.error().message, ""};
  std::uint64_t budget = options_.max_returned_bytes - parts_.bytes();
  auto file_node = [this](std::string_view data) {
    Json node{{"type", "file"}, {"size", data.size()}, {"part", "return:" + std::to_string(parts_.count())}};
    std::span<const std::byte> piece = std::as_bytes(std::span(data));
    node["sha256"] = std::move(store_binary_parts({&piece, 1})[0]);
    return node;
  };
  if (ret.kind == PathKind::file) {
    auto file = workspace_->read_file(*path, budget);
    if (!file) throw InstructionFailure{file.error().kind, file.error().message, ""};
    keep_returned(ret.key, file_node(file->data).dump());
    return;
  }
  auto folder = workspace_->read_folder(*path, budget);
  if (!folder) throw InstructionFailure{folder.error().kind, folder.error().message, ""};
  Json files = Json::object();
  for (const auto& [relative, data] : folder->files) files[relative] = file_node(data);
  Json node{{"type", "folder"}, {"files", std::move(files)}, {"directories", folder->directories}};
  keep_returned(ret.key, node.dump(-1, ' ', false, Json::error_handler_t::replace));
}

// The encoder keeps binary values within the response limit; their text is counted here,
// so that a return whose text would pass it (a list of millions of numbers, say) fails
// with response_too_large, as the front would answer it, before the worker builds and sends
// an answer no client may receive (and the front may refuse to read).
void ProgramRun::keep_returned(const std::string& key, std::string text) {
  std::uint64_t bytes = results_bytes_ + key.size() + text.size() + 4;  // the key quoted, a colon, a comma
  if (bytes + parts_.bytes() > options_.max_returned_bytes)
    throw InstructionFailure{ErrorKind::response_too_large,
                             "return '" + key.substr(0, 200) + "': the returned values come to " +
                                 std::to_string(bytes) + " bytes of text and " + std::to_string(parts_.bytes()) +
                                 " of binary data, past the server's response limit of " +
                                 std::to_string(options_.max_returned_bytes) + " bytes",
                             ""};
  results_bytes_ = bytes;
  results_.emplace_back(key, std::move(text));
}

std::vector<std::string> ProgramRun::store_binary_parts(std::span<const std::span<const std::byte>> pieces) {
  std::vector<const BlobBuilder::Digested*> repeats;
  for (auto piece : pieces) {
    auto uploaded = uploaded_bytes_.find(piece.data());
    repeats.push_back(uploaded != uploaded_bytes_.end() ? &uploaded->second : nullptr);
  }
  Result<std::vector<std::string>> digests;
  {
    cpython::GilReleased unlocked;  // the program's own threads may go on meanwhile
    digests = parts_.append_hashed(pieces, repeats);
  }
  if (!digests) throw InstructionFailure{ErrorKind::engine, digests.error().message, ""};
  return std::move(*digests);
}

const Blob& ProgramRun::blob(const std::string& digest) const {
  auto it = blobs_.find(digest);
  if (it == blobs_.end())
    throw InstructionFailure{ErrorKind::engine, "blob " + digest + " was not delivered to the executor", ""};
  return it->second;
}

PyObject* ProgramRun::value(const Ref& ref) const {
  auto it = values_.find(ref.id);
  if (it == values_.end())
    throw InstructionFailure{ErrorKind::runtime, "'" + ref.id + "' has no value (an anonymous file "
                                                                "upload?)", ""};
  return it->second.get();
}

void ProgramRun::fail(std::size_t index, ErrorKind kind, std::string message, std::string traceback) {
  InstructionError error;
  error.kind = kind;
  error.message = cut_error_message(std::move(message));
  error.instruction_index = index;
  if (index < program_.instructions().size()) {
    const Instruction& instruction = program_.instructions()[index];
    error.instruction_op = op_name(instruction);
    if (auto id = instruction_id(instruction)) error.instruction_id = std::string(*id);
  } else {
    error.instruction_op = "upload";
  }
  error.traceback = cut_traceback(std::move(traceback));
  result_.error = std::move(error);
}

std::string ProgramRun::decode_output(const std::string& bytes) const {
  PyRef text = PyRef::steal(
      PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace"));
  Py_ssize_t size = 0;
  const char* utf8 = text ? PyUnicode_AsUTF8AndSize(text.get(), &size) : nullptr;
  if (utf8 == nullptr) {
    PyErr_Clear();
    return {};
  }
  return std::string(utf8, static_cast<std::size_t>(size));  // NUL bytes included
}

}  // namespace kcoral
