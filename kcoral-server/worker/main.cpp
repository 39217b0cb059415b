// kcoral-worker: the worker parent (zygote) that kcoral-server starts, and, forked from
// it, the worker processes that run programs (see zygote.hpp).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "channel.hpp"
#include "kcoral/executor.hpp"
#include "messages.hpp"
#include "process_tree.hpp"
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

// The Python of the environment this binary was installed into (bin/kcoral-worker next
// to bin/python3), so a pip-installed server embeds its own virtual environment.
std::string python_beside_this_binary() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return {};
  std::string exe(path, static_cast<std::size_t>(n));
  std::string candidate = exe.substr(0, exe.rfind('/')) + "/python3";
  return ::access(candidate.c_str(), X_OK) == 0 ? candidate : std::string();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kcoral-worker: the worker processes of kcoral-server (started by it, not by hand)"};
  int control_fd = -1;
  std::string python;
  kcoral::ZygoteOptions options;
  app.add_option("--control-fd", control_fd, "descriptor of the channel to the front")->required();
  app.add_option("--device", options.device, "cpu or gpu")->check(CLI::IsMember({"cpu", "gpu"}));
  app.add_option("--work-root", options.work_root, "where programs' working directories go")->required();
  app.add_option("--python", python, "the Python environment to embed");
  app.add_option("--programs-per-worker", options.programs_per_worker, "programs a worker runs before exiting")
      ->check(CLI::PositiveNumber);
  app.add_option("--cuda-connections", options.cuda_connections, "CUDA_DEVICE_MAX_CONNECTIONS of the workers")
      ->check(CLI::Range(0, 32));
  CLI11_PARSE(app, argc, argv);

  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the front
  raise_descriptor_limit();
  kcoral::become_subreaper();
  Channel control{kcoral::UniqueFd(control_fd)};

  if (python.empty()) python = python_beside_this_binary();
  // The heavy imports happen once, here, not in every child. A GPU parent imports torch
  // but makes no CUDA context: CUDA does not survive fork, each child makes its own.
  bool gpu = options.device == "gpu";
  std::vector<std::string> preload{"numpy"};
  if (gpu) preload.push_back("torch");
  auto executor = kcoral::Executor::create({python, options.work_root, preload, gpu});
  if (!executor) {
    (void)kcoral::wire::send(control, kcoral::wire::ZygoteFailed{executor.error().message});
    return 1;
  }
  auto versions = (*executor)->versions();
  (*executor)->prepare_for_fork();
  (void)kcoral::wire::send(control, kcoral::wire::ZygoteReady{std::move(versions)});

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);  // handled in the loop: children and their orphans go first
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  int signal_fd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  return kcoral::Zygote(options, **executor, std::move(control)).serve(signal_fd);
}
