// WorkerOptions: to_argv and parse, flag by flag in the same order.
#include "worker_options.hpp"

#include <CLI/CLI.hpp>
#include <tuple>

#include "user_id_pool.hpp"

namespace kcoral {
namespace {

constexpr const char* kUsage = "the worker parent of kcoral-server (started by it, not by hand)";

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

}  // namespace

std::vector<std::string> WorkerOptions::to_argv() const {
  std::vector<std::string> args{
      "--control-fd", std::to_string(control_fd),
      "--device", device,
      "--work-root", work_root,
      "--init", init_path,
      "--preload", joined(preload),
      "--programs-per-worker", std::to_string(programs_per_worker),
      "--fork-parents", std::to_string(fork_parents),
      "--reuse-check", reuse_check ? "state" : "none",
      "--sandbox", sandboxed ? "namespaces" : "none",
      "--memory-limit-bytes", std::to_string(sandbox_policy.memory_bytes),
      "--file-size-limit-bytes", std::to_string(sandbox_policy.file_size_bytes),
      "--process-limit", std::to_string(sandbox_policy.processes),
      "--open-files-limit", std::to_string(sandbox_policy.open_files),
      "--scratch-bytes", std::to_string(sandbox_policy.scratch_bytes),
      "--compile-cache-bytes", std::to_string(compile_cache_bytes),
      "--sandbox-uid-range", std::to_string(sandbox_policy.first_uid) + "-" + std::to_string(sandbox_policy.last_uid)};
  for (const std::string& path : sandbox_policy.readable_paths) args.insert(args.end(), {"--readable-path", path});
  for (const std::string& assignment : program_environment) args.insert(args.end(), {"--program-env", assignment});
  return args;
}

Result<WorkerOptions> WorkerOptions::parse(const std::vector<std::string>& arguments) {
  WorkerOptions out;
  CLI::App app{kUsage};
  std::string reuse_check, sandbox, uid_range;
  app.add_option("--control-fd", out.control_fd)->required();
  app.add_option("--device", out.device)->required()->check(CLI::IsMember({"cpu", "gpu"}));
  app.add_option("--work-root", out.work_root)->required();
  app.add_option("--init", out.init_path)->required();
  app.add_option("--preload", out.preload)->required()->delimiter(',');
  app.add_option("--programs-per-worker", out.programs_per_worker)->required()->check(CLI::PositiveNumber);
  app.add_option("--fork-parents", out.fork_parents)->required()->check(CLI::Range(1, 64));
  app.add_option("--reuse-check", reuse_check)->required()->check(CLI::IsMember({"state", "none"}));
  app.add_option("--sandbox", sandbox)->required()->check(CLI::IsMember({"namespaces", "none"}));
  app.add_option("--memory-limit-bytes", out.sandbox_policy.memory_bytes)->required()->check(CLI::NonNegativeNumber);
  app.add_option("--file-size-limit-bytes", out.sandbox_policy.file_size_bytes)->required()->check(CLI::NonNegativeNumber);
  app.add_option("--process-limit", out.sandbox_policy.processes)->required()->check(CLI::NonNegativeNumber);
  app.add_option("--open-files-limit", out.sandbox_policy.open_files)->required()->check(CLI::NonNegativeNumber);
  app.add_option("--scratch-bytes", out.sandbox_policy.scratch_bytes)->required()->check(CLI::NonNegativeNumber);
  app.add_option("--compile-cache-bytes", out.compile_cache_bytes)->required()->check(CLI::NonNegativeNumber);
  app.add_option("--sandbox-uid-range", uid_range)->required();
  app.add_option("--readable-path", out.sandbox_policy.readable_paths);
  app.add_option("--program-env", out.program_environment);
  try {
    std::vector<std::string> reversed(arguments.rbegin(), arguments.rend());  // CLI11 reads from the back
    app.parse(reversed);
  } catch (const CLI::ParseError& error) {
    return fail(ErrorKind::engine, std::string("kcoral worker parent: ") + error.what());
  }
  std::erase(out.preload, std::string());  // `--preload ''`: none
  out.reuse_check = reuse_check == "state";
  out.sandboxed = sandbox == "namespaces";
  auto range = parse_id_range(uid_range);
  if (!range) return fail(ErrorKind::engine, "kcoral worker parent: --sandbox-uid-range: " + range.error().message);
  std::tie(out.sandbox_policy.first_uid, out.sandbox_policy.last_uid) = *range;
  return out;
}

}  // namespace kcoral
