// Zygote: the worker parent. It starts Python once, imports the heavy modules, and then
// forks a fresh worker for every program on the front's request, ahead of time: a worker
// inherits a warm interpreter in milliseconds, runs its program, kills whatever the
// program left running and exits, so no state of one program (working directory,
// modules, monkeypatches, environment, child processes) reaches the next. Each worker
// talks to the front over a channel of its own, which the zygote hands over at fork
// time. The zygote reaps workers, kills their orphans and removes their files.
//
//   Zygote zygote(options, executor, std::move(control));
//   return zygote.serve(signal_fd);   // until the front goes or a signal says stop
#pragma once

#include <sys/types.h>

#include <set>
#include <string>

#include "channel.hpp"
#include "kcoral/executor.hpp"

namespace kcoral {

struct ZygoteOptions {
  std::string device = "cpu";
  std::string work_root;
  std::size_t programs_per_worker = 1;
  int cuda_connections = 0;  // > 0: CUDA_DEVICE_MAX_CONNECTIONS of the workers
};

class Zygote {
 public:
  Zygote(ZygoteOptions options, Executor& executor, Channel control)
      : options_(std::move(options)), executor_(executor), control_(std::move(control)) {}

  // Serves fork requests until the front closes the control channel or a signal other
  // than SIGCHLD arrives on `signal_fd`; then kills every worker. Returns the exit code.
  [[nodiscard]] int serve(int signal_fd);

 private:
  [[nodiscard]] std::string worker_root(pid_t pid) const;
  void fork_worker(int signal_fd, const std::string& visible_devices);
  void reap();
  void report_error(const std::string& message);

  ZygoteOptions options_;
  Executor& executor_;
  Channel control_;
  std::set<pid_t> workers_;
};

}  // namespace kcoral
