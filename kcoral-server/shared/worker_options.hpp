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
#include "sandbox_policy.hpp"

namespace kcoral {

struct WorkerOptions {
  int control_fd = 3;          // the channel to the front
  std::string device = "cpu";  // cpu or gpu
  std::string work_root;       // where programs' working directories go
  std::string init_path;       // kcoral-init, each sandbox's first process
  std::vector<std::string> preload;  // modules the worker parent imports before it forks
  std::size_t programs_per_worker = 1;
  std::size_t fork_parents = 1;  // processes that fork workers side by side (worker/zygote.hpp)
  bool reuse_check = true;   // a reused worker's state is checked between programs
  // The sandbox (worker/sandbox.hpp); kcoral-server's --help explains each.
  bool sandboxed = true;  // --sandbox namespaces; false: none
  SandboxPolicy sandbox_policy;
  std::uint64_t compile_cache_bytes = 0;  // each tenant's, which the front mounts in a sandbox
  std::vector<std::string> program_environment;  // NAME=VALUE, as --program-env gives them

  // The flags, program name left out.
  [[nodiscard]] std::vector<std::string> to_argv() const;
  // `arguments` as to_argv wrote them (program name left out); an error names the flag.
  [[nodiscard]] static Result<WorkerOptions> parse(const std::vector<std::string>& arguments);

  bool operator==(const WorkerOptions&) const = default;
};

}  // namespace kcoral
