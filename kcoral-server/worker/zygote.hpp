// Zygote: the worker parent. Its Python imports the heavy modules once, and then it
// forks workers on the front's request, ahead of time: a worker inherits a warm
// interpreter in milliseconds, runs its program, kills whatever the program left running
// and exits, so no state of one program (working directory, modules, monkeypatches,
// environment, child processes) reaches the next. With `programs_per_worker` above 1 a
// worker runs several programs of one tenant, checked between them when `reuse_check`
// says so. Each worker talks to the front over a channel of its own, which the zygote
// hands over at fork time. The zygote reaps workers, kills their orphans and removes their
// files.
//
//   Zygote zygote(options, executor, sandbox, std::move(control));
//   return zygote.serve(signal_fd, versions);  // until the front goes or a signal says stop
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <set>
#include <vector>
#include <string>

#include "channel.hpp"
#include "kcoral/executor.hpp"
#include "messages.hpp"
#include "program_environment.hpp"
#include "sandbox.hpp"
#include "worker_options.hpp"

namespace kcoral {

struct ZygoteOptions {
  WorkerOptions flags;                       // as the front gave them
  EnvironmentVariables program_environment;  // flags.program_environment, parsed
  std::string interpreter_bin;               // the directory of the Python running this process
};

class Zygote {
 public:
  Zygote(ZygoteOptions options, Executor& executor, Sandbox& sandbox, Channel control)
      : options_(std::move(options)), executor_(executor), sandbox_(sandbox), control_(std::move(control)) {}

  // Forks one worker that sets its sandbox up and exits: whether workers can start here.
  [[nodiscard]] Status trial();
  // Tells the front it is ready (with `versions`), then serves fork requests until the
  // front closes the control channel or a signal other than SIGCHLD arrives on
  // `signal_fd`; then kills every worker. Returns the exit code.
  [[nodiscard]] int serve(int signal_fd, std::map<std::string, std::string> versions);
  // Tells the front the zygote cannot start, and why. Returns the exit code.
  [[nodiscard]] int failed_to_start(const std::string& message);

 private:
  [[nodiscard]] std::string worker_root(pid_t pid) const;
  void fork_worker(int signal_fd, const messages::Fork& fork);
  void reap();
  void fork_failed(const std::string& message);

  // Forks a child (sandboxed, when the sandbox is on); runs `child` in it, which must not
  // return. The parent gets the pid.
  [[nodiscard]] Result<pid_t> fork_child(const std::function<void()>& child);

  ZygoteOptions options_;
  Executor& executor_;
  Sandbox& sandbox_;
  Channel control_;
  std::set<pid_t> workers_;
};

}  // namespace kcoral
