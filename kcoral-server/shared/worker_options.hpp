// The worker parent's command line: what kcoral-server tells the worker parent when it
// starts it (front/zygote_handle.hpp). The front writes it (to_argv) and the worker parent
// reads it (parse) from this one type, so the two sides cannot disagree on a flag. Every
// flag is required: the front decides every value (its defaults are ServerConfig's), and
// the worker parent has none of its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kcoral/error.hpp"

namespace kcoral {

struct WorkerOptions {
  int control_fd = 3;          // the channel to the front
  std::string device = "cpu";  // cpu or gpu
  std::string work_root;       // where programs' working directories go
  std::string init_path;       // kcoral-init, each sandbox's first process
  std::vector<std::string> preload;  // modules the worker parent imports before it forks
  std::size_t programs_per_worker = 1;
  bool reuse_check = true;   // a reused worker's state is checked between programs
  int cuda_connections = 0;  // > 0: CUDA_DEVICE_MAX_CONNECTIONS of the workers
  // The sandbox (worker/sandbox.hpp); kcoral-server's --help explains each.
  bool sandboxed = true;  // --sandbox namespaces; false: none
  std::uint64_t memory_limit_bytes = 0;
  std::uint64_t file_size_limit_bytes = 0;
  std::uint64_t process_limit = 0;
  std::uint64_t open_files_limit = 0;
  std::uint64_t scratch_bytes = 0;
  std::uint64_t compile_cache_bytes = 0;  // each tenant's, which the front mounts in a sandbox
  std::uint32_t first_uid = 0;            // the workers' outside user ids
  std::uint32_t last_uid = 0;
  std::vector<std::string> readable_paths;
  std::vector<std::string> program_environment;  // NAME=VALUE, as --program-env gives them

  // The flags, program name left out.
  [[nodiscard]] std::vector<std::string> to_argv() const;
  // `arguments` as to_argv wrote them (program name left out); an error names the flag.
  [[nodiscard]] static Result<WorkerOptions> parse(const std::vector<std::string>& arguments);

  bool operator==(const WorkerOptions&) const = default;
};

}  // namespace kcoral
