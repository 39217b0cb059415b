// The worker parent (zygote) that kcoral-server starts, and, forked from it, the worker
// processes that run programs (see zygote.hpp): run_worker_parent, which the native
// module's worker_main calls under the Python the front started.
#include "worker_parent.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "channel.hpp"
#include "fork_scope.hpp"
#include "huge_pages.hpp"
#include "interpreter.hpp"
#include "kcoral/executor.hpp"
#include "kcoral/unique_fd.hpp"
#include "messages.hpp"
#include "process_tree.hpp"
#include "kcoral/read_to_end.hpp"
#include "program_environment.hpp"
#include "worker_options.hpp"
#include "zygote.hpp"

namespace {

using kcoral::Channel;

void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// Executor::versions(), asked in a child of this process: reading them imports
// importlib.metadata (with zipfile, email and threading), which this process, the one every
// worker is forked from, would otherwise hold; each fork, start and exit of a worker costs
// more for every module it holds (threading's after-fork work alone is 0.3 ms a worker).
// No versions if the child fails.
std::map<std::string, std::string> versions_in_child(kcoral::Executor& executor) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  kcoral::UniqueFd read_end(fds[0]), write_end(fds[1]);
  pid_t pid;
  {
    kcoral::cpython::ForkScope fork;
    pid = ::fork();
    if (pid == 0) {
      fork.in_child();
      std::string text;  // name, version, name, version..., each ended by a NUL
      for (const auto& [name, version] : executor.versions())
        text.append(name).append(1, '\0').append(version).append(1, '\0');
      for (std::size_t done = 0; done < text.size();) {
        ssize_t n = ::write(write_end.get(), text.data() + done, text.size() - done);
        if (n <= 0) ::_exit(1);
        done += static_cast<std::size_t>(n);
      }
      ::_exit(0);
    }
  }
  write_end.reset();
  if (pid < 0) return {};
  std::string text = kcoral::read_to_end(read_end.get());
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  std::map<std::string, std::string> versions;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t name_end = text.find('\0', at);
    std::size_t version_end = name_end == std::string::npos ? name_end : text.find('\0', name_end + 1);
    if (version_end == std::string::npos) break;
    versions[text.substr(at, name_end - at)] = text.substr(name_end + 1, version_end - name_end - 1);
    at = version_end + 1;
  }
  return versions;
}

// The start line's account of the preload: "numpy 0.21 s, torch 3.90 s; not installed:
// cutlass; left out: x (opened /dev/nvidiactl)".
std::string describe_preload(const std::vector<kcoral::PreloadedModule>& modules) {
  using Outcome = kcoral::PreloadedModule::Outcome;
  std::string imported, missing, left_out;
  auto add = [](std::string& list, const std::string& item) { list += (list.empty() ? "" : ", ") + item; };
  for (const auto& module : modules) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.2f s", module.seconds);
    if (module.outcome == Outcome::imported) add(imported, module.name + " " + seconds);
    else if (module.outcome == Outcome::not_installed) add(missing, module.name);
    else add(left_out, module.name + " (" + module.detail.substr(0, std::min(module.detail.find('\n'), std::size_t{200})) + ")");
  }
  std::string out = imported.empty() ? "nothing" : imported;
  if (!missing.empty()) out += "; not installed: " + missing;
  if (!left_out.empty()) out += "; left out: " + left_out;
  return out;
}

// The zygote's options: the front's flags, and its --program-env parsed; an error names
// one that is not NAME=VALUE.
kcoral::Result<kcoral::ZygoteOptions> zygote_options(const kcoral::WorkerOptions& flags) {
  kcoral::ZygoteOptions options{flags, {}, {}};
  for (const std::string& assignment : flags.program_environment) {
    auto variable = kcoral::parse_environment_assignment(assignment);
    if (!variable) return kcoral::fail(kcoral::ErrorKind::engine, "--program-env: " + variable.error().message);
    options.program_environment.push_back(std::move(*variable));
  }
  return options;
}

// The sandbox's limits and paths of the front's flags (the rest is set where it is known).
kcoral::SandboxConfig sandbox_limits(const kcoral::WorkerOptions& flags) {
  kcoral::SandboxConfig config;
  config.policy = flags.sandbox_policy;
  return config;
}

}  // namespace

namespace kcoral {

int run_worker_parent(const std::vector<std::string>& arguments) {
  auto parsed = WorkerOptions::parse(arguments);
  if (!parsed) {
    std::fprintf(stderr, "%s\n", parsed.error().message.c_str());
    return 2;
  }
  const WorkerOptions& flags = *parsed;
  auto options = zygote_options(flags);
  if (!options) {
    std::fprintf(stderr, "kcoral worker parent: %s\n", options.error().message.c_str());
    return 2;
  }
  kcoral::SandboxConfig sandbox_config = sandbox_limits(flags);

  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the front
  raise_descriptor_limit();
  kcoral::become_subreaper();
  Channel control{kcoral::UniqueFd(flags.control_fd)};
  auto failed = [&](const std::string& message) {
    (void)kcoral::messages::send(control, kcoral::messages::ZygoteFailed{message});
    return 1;
  };

  // Before the interpreter starts threads: a zygote that is not root enters a user
  // namespace of its own here, which a threaded process cannot.
  bool gpu = flags.device == "gpu";
  sandbox_config.enabled = flags.sandboxed;
  sandbox_config.gpu = gpu;
  sandbox_config.root_mountpoint = flags.work_root + "/sandbox-root";
  sandbox_config.init_path = flags.init_path;
  kcoral::Sandbox sandboxes(sandbox_config);
  if (auto prepared = sandboxes.prepare_zygote(); !prepared) return failed(prepared.error().message);

  // The heavy imports happen once, here, not in every child; each only if it leaves this
  // process safe to fork (no CUDA: each child makes its own context). The interpreter is
  // the one running this process.
  auto executor = kcoral::Executor::create({{}, flags.work_root, {}, gpu});
  if (!executor) return failed(executor.error().message);
  auto preloaded = (*executor)->preload(flags.preload);
  if (!preloaded) return failed(preloaded.error().message);
  std::fprintf(stderr, "kcoral-server: preloaded: %s\n", describe_preload(*preloaded).c_str());
  auto versions = versions_in_child(**executor);
  (*executor)->freeze_objects();
  // After the collection and freeze, which leave the heap as the workers will find it.
  std::fprintf(stderr, "kcoral-server: huge pages: %s\n", kcoral::collapse_anonymous_memory().describe().c_str());
  options->interpreter_bin = std::filesystem::path(kcoral::cpython::interpreter_executable()).parent_path().string();

  // What workers may read: the interpreter's environment and the libraries' directories.
  sandboxes.add_readable_paths(kcoral::cpython::interpreter_paths());
  if (const char* library_path = std::getenv("LD_LIBRARY_PATH")) {
    std::vector<std::string> directories;
    std::string all = library_path;
    for (std::size_t start = 0, end; start <= all.size(); start = end + 1) {
      end = std::min(all.find(':', start), all.size());
      directories.push_back(all.substr(start, end - start));
    }
    sandboxes.add_readable_paths(directories);
  }

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);  // handled in the loop: children and their orphans go first
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  int signal_fd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  kcoral::Zygote zygote(*options, **executor, sandboxes, std::move(control));
  // A sandbox that cannot be made here fails the start, not every program.
  if (sandbox_config.enabled) {
    if (auto tried = zygote.trial(); !tried) return zygote.failed_to_start(tried.error().message);
    std::fprintf(stderr, "kcoral-server: limits: %s\n", sandboxes.limits_description().c_str());
  }
  if (auto started = zygote.start_helpers(signal_fd); !started) return zygote.failed_to_start(started.error().message);
  return zygote.serve(signal_fd, std::move(versions));
}

}  // namespace kcoral
