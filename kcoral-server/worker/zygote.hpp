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
// The kernel forks one address space at a time, and a zygote holding large libraries
// takes milliseconds a fork (copying its page tables); so with `fork_parents` above 1 the
// zygote forks that many helpers, copies of itself sharing its memory, each of which
// forks, admits and reaps workers as the zygote would (their own user ids and control
// groups: Sandbox::become_helper). The zygote then forks no worker itself: it hands each
// fork request to the helper with the fewest forks in flight and live workers, and passes
// their answers on to the front as they are. A helper that dies fails the zygote (the
// front starts a new one).
//
//   Zygote zygote(options, executor, sandbox, std::move(control));
//   zygote.start_helpers(signal_fd);            // options.flags.fork_parents of them (none for 1)
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
  // After the trial: forks options.flags.fork_parents helpers (none for 1) and waits until
  // each is ready to fork.
  [[nodiscard]] Status start_helpers(int signal_fd);

 private:
  // A helper, seen from the zygote: its control channel, the fork requests it has not
  // answered yet and the workers it forked that have not exited.
  struct Helper {
    pid_t pid = -1;
    Channel channel;
    std::size_t forks_asked = 0;
    std::set<pid_t> workers{};
    bool died = false;  // ended before the zygote asked it to
    [[nodiscard]] std::size_t load() const { return forks_asked + workers.size(); }
  };

  // Hands a fork request to a helper with the least load: forks in flight and live
  // workers, each of which holds one of the helper's slice of user ids.
  [[nodiscard]] Status dispatch(const messages::Fork& fork);
  // Passes what `helper` said on to the front; an error when the helper broke its protocol
  // or is gone.
  [[nodiscard]] Status relay(Helper& helper);
  // Closes the helpers' channels, which ends them (they kill their workers and remove
  // their groups), and waits a while for them; one that does not end is killed.
  void end_helpers();

  [[nodiscard]] std::string worker_root(pid_t pid) const;
  void fork_worker(int signal_fd, const messages::Fork& fork);
  // Reaps what ended; whether a helper did.
  bool reap();
  void fork_failed(const std::string& message);

  // Forks a child (sandboxed, when the sandbox is on); runs `child` in it, which must not
  // return. The parent gets the pid.
  [[nodiscard]] Result<pid_t> fork_child(const std::function<void()>& child);

  ZygoteOptions options_;
  Executor& executor_;
  Sandbox& sandbox_;
  Channel control_;
  std::set<pid_t> workers_;
  std::vector<Helper> helpers_;  // the zygote's; empty in a helper, and with fork_parents 1
  std::size_t next_helper_ = 0;  // where dispatch() starts looking
};

}  // namespace kcoral
