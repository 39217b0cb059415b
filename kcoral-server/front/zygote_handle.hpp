// ZygoteHandle: the front's handle on the worker parent process (kWorkerBootstrap).
//
// Starts the process with a control channel, asks it to fork children, and reports what
// it says: ready (with the environment's versions), forked (a child's pid and channel),
// exited (a child's end, and the failure to report for its program when its processes
// ran out of their memory limit), or failed (the zygote itself is gone or broken).
//
// The zygote gets none of the server's environment but what the worker machinery reads
// before any program runs (kMachineryVariables: the dynamic loader's library path, the
// interpreter's own variables, CUPTI's path), the programs' PATH and LANG, and the
// operator's --program-env; each worker then sets its programs' own list
// (kcoral-server/shared/program_environment.hpp). A token or any other secret in the
// server's environment so never reaches a worker's memory. The zygote
// runs no user code, but what it says is checked all the same: a message out of turn
// (a fork nobody asked for, a second ready), or a forked pid that is not the zygote's
// own child, counts as a broken zygote, which is killed and reported failed. The control
// groups a killed worker parent could not remove (ProgramCgroups::remove_left), the next
// start removes. All callbacks run on the strand given at construction.
#pragma once

#include <sys/types.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "channel.hpp"
#include "messages.hpp"
#include "process.hpp"
#include "worker_options.hpp"

namespace kcoral {

struct ZygoteConfig {
  std::string python;     // runs the worker parent (kWorkerBootstrap)
  WorkerOptions worker;   // its command line
};

// The worker parent's start: `python -c kWorkerBootstrap FLAGS...` loads kcoral._native
// from the kcoral package of that Python, without importing the package itself (whose
// modules could start threads before the worker parent unshares), and hands the flags to
// its worker_main (worker/worker_parent.hpp). sys.argv and sys.path[0] are left as an
// embedded interpreter has them, for the programs' sake.
inline constexpr const char* kWorkerBootstrap =
    "import importlib.machinery, importlib.util, sys\n"
    "arguments, sys.argv = sys.argv[1:], ['']\n"
    "if sys.path[:1] == ['']: del sys.path[0]\n"
    "package = importlib.util.find_spec('kcoral')\n"
    "found = package and importlib.machinery.PathFinder.find_spec('_native', package.submodule_search_locations)\n"
    "if not found: sys.exit(f'the worker parent: {sys.executable} has no kcoral._native: install the server side "
    "(pip install \"kcoral[server]\") into its environment, or name another Python with --python')\n"
    "spec = importlib.util.spec_from_file_location('kcoral._native', found.origin)\n"
    "native = sys.modules['kcoral._native'] = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(native)\n"
    "native.worker_main(arguments)\n";

// What the zygote takes from the server's environment, when set there.
inline constexpr const char* kMachineryVariables[] = {"LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "KCORAL_PYTHON",
                                                     "KCORAL_CUPTI_LIBRARY"};

// The zygote's environment (NAME=VALUE): of `server_environment` (environ), only
// kMachineryVariables; then PATH and LANG as programs get them, and the operator's.
[[nodiscard]] std::vector<std::string> zygote_environment(char** server_environment,
                                                          const std::vector<std::string>& program_environment);

class ZygoteHandle {
 public:
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;
  struct Callbacks {
    std::function<void(std::map<std::string, std::string> versions)> on_ready;
    std::function<void(Process process, UniqueFd channel)> on_forked;  // a worker, held by the pidfd sent
    // `failure`: why the program it ran failed, when the zygote knows (out of memory).
    std::function<void(pid_t pid, std::string how, std::optional<std::string> failure)> on_exited;
    std::function<void(std::string message)> on_failed;       // the zygote is gone, or cannot go on
    std::function<void(std::string message)> on_fork_failed;  // the oldest fork asked for, not made
  };

  ZygoteHandle(Strand strand, ZygoteConfig config, Callbacks callbacks);
  ZygoteHandle(const ZygoteHandle&) = delete;
  ZygoteHandle& operator=(const ZygoteHandle&) = delete;
  ~ZygoteHandle();

  [[nodiscard]] Status start();
  // Asks for one more prepared child, of the kind `fork` says (its GPUs and CUDA queues).
  void request_fork(const messages::Fork& fork);
  // Ends the zygote: closes its channel, on which it kills its children and exits, and
  // waits for that on the strand (escalating to SIGTERM, then SIGKILL), never blocking it.
  // The destructor waits for what still exits then, at most three seconds.
  void stop();
  // The pid of the parent started last, running or lost (for the record of its failure); -1
  // before the first start.
  [[nodiscard]] pid_t pid() const { return started_pid_; }
  [[nodiscard]] bool running() const { return static_cast<bool>(process_) && channel_.valid(); }

 private:
  void wait_readable();
  void read_messages();
  void handle(messages::Received received);
  void lost(const std::string& why);
  struct Exiting;
  void retire(Process process);
  void escalate(std::weak_ptr<Exiting> exiting, std::chrono::milliseconds after);
  static void finish(Process& process);  // waits here: SIGTERM after 1 s, SIGKILL 2 s later
  void remove_left_groups();

  Strand strand_;
  ZygoteConfig config_;
  Callbacks callbacks_;
  Process process_;  // the running worker parent
  pid_t started_pid_ = -1;
  std::vector<std::shared_ptr<Exiting>> exiting_;  // earlier ones on their way out
  Channel channel_;
  boost::asio::posix::stream_descriptor readable_;
  bool ready_ = false;
  std::vector<pid_t> fork_parents_;  // its helpers (ZygoteReady), whose children workers may be
  std::size_t forks_asked_ = 0;  // not yet answered
  std::vector<pid_t> left_groups_;  // retired worker parents, whose groups may be left
};

}  // namespace kcoral
