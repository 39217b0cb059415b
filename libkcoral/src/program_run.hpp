// ProgramRun: the state of one program while the executor runs it.
//
// Holds the values instructions make (by id), the returned results and their binary
// parts, the workspace and the output capture, and decides lease placement before each
// instruction. Lives for one Executor::run call, with the GIL held throughout.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "device.hpp"
#include "kcoral/executor.hpp"
#include "py_error.hpp"
#include "workspace.hpp"

namespace kcoral {

// sys.modules names of uploaded modules start with this.
inline constexpr const char* kUploadedModulePrefix = "kcoral_upload_";

// What a ProgramRun borrows from its Executor.
struct ExecutionContext {
  PyObject* support;  // the _kcoral_executor helper module
  Device& device;
  const std::string& work_root;
  std::uint64_t& modules_loaded;  // for unique module names across runs
};

class ProgramRun {
 public:
  ProgramRun(ExecutionContext context, const Program& program, const BlobMap& blobs,
             GpuLease& lease, const RunOptions& options);
  ProgramRun(const ProgramRun&) = delete;
  ProgramRun& operator=(const ProgramRun&) = delete;

  [[nodiscard]] ProgramResult execute();

 private:
  void run_instructions();
  // What an instruction can do without the GPU, done before its lease is taken so that it
  // holds the GPU (and whoever waits for it) no longer than it must: a Python module's
  // file is written and compiled, a library's file written.
  void prepare(const Instruction& instruction);
  void place_lease(const Instruction& instruction);
  void drop_lease();
  // The lease, with the time waited for it and held added to the result.
  [[nodiscard]] Status take_lease();
  void give_lease_back();
  void clean_up();

  void execute(const Upload& upload);
  void execute(const GetFunction& get);
  void execute(const Run& run);
  void execute(const ReturnValue& ret);
  void execute(const ReturnPath& ret);
  void keep_returned(const std::string& key, std::string text);

  cpython::PyRef load_module(const Upload& upload);
  // A new file for an upload's own bytes (module source, library) outside the workspace.
  std::string own_file_path(const std::string& id, const char* extension) const;
  const Blob& blob(const std::string& digest) const;
  PyObject* value(const Ref& ref) const;
  void fail(std::size_t index, ErrorKind kind, std::string message, std::string traceback);
  // Appends returned binary values to parts_; their SHA-256 digests, in order.
  std::vector<std::string> store_binary_parts(std::span<const std::span<const std::byte>> pieces);
  std::string decode_output(const std::string& bytes) const;

  ExecutionContext context_;
  const Program& program_;
  const BlobMap& blobs_;
  GpuLease& lease_;
  const RunOptions& options_;

  std::optional<Workspace> workspace_;
  std::unordered_map<std::string, cpython::PyRef> values_;
  std::unordered_map<std::string, std::string> module_sources_;  // cuda uploads: id -> text
  // Uploads prepared off the lease (see prepare): their file and, for Python, its code.
  struct Prepared {
    std::string path;
    cpython::PyRef code;
  };
  std::unordered_map<std::string, Prepared> prepared_;
  std::unordered_set<std::string> cpu_only_functions_;
  std::unordered_map<std::string, UploadKind> uploads_;  // upload id -> kind
  std::vector<std::string> registered_modules_;  // sys.modules names to drop afterwards
  std::vector<std::pair<std::string, std::string>> results_;  // key -> JSON text
  std::uint64_t results_bytes_ = 0;  // their text, keys and separators included
  BlobBuilder parts_;  // every returned binary value, back to back in one memfd
  // Large bytes uploads, by where their bytes value holds them: one returned as it came is
  // compared with its blob, not hashed again (store_binary_parts).
  std::unordered_map<const std::byte*, BlobBuilder::Digested> uploaded_bytes_;
  std::size_t current_ = 0;
  std::chrono::steady_clock::time_point held_since_;
  ProgramResult result_;
};

}  // namespace kcoral
