// ZygoteHandle: the front's handle on the worker parent process (kcoral-worker).
//
// Starts the process with a control channel, asks it to fork children, and reports what
// it says: ready (with the environment's versions), forked (a child's pid and channel),
// exited (a child's end), or failed (the zygote itself is gone or broken). The zygote
// runs no user code, but what it says is checked all the same: a message out of turn
// (a fork nobody asked for, a second ready), or a forked pid that is not the zygote's
// own child, counts as a broken zygote, which is killed and reported failed. All
// callbacks run on the strand given at construction.
#pragma once

#include <sys/types.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "channel.hpp"
#include "messages.hpp"

namespace kcoral {

struct ZygoteConfig {
  std::string worker_path;
  std::string device = "cpu";
  std::string work_root;
  std::string python;
  std::size_t programs_per_worker = 1;
  int cuda_connections = 0;  // > 0: the workers' CUDA_DEVICE_MAX_CONNECTIONS
  std::vector<std::string> sandbox_args;  // passed on to kcoral-worker as they are
};

class ZygoteHandle {
 public:
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;
  struct Callbacks {
    std::function<void(std::map<std::string, std::string> versions)> on_ready;
    std::function<void(pid_t pid, UniqueFd channel)> on_forked;
    std::function<void(pid_t pid, std::string how)> on_exited;
    std::function<void(std::string message)> on_failed;
  };

  ZygoteHandle(Strand strand, ZygoteConfig config, Callbacks callbacks);
  ZygoteHandle(const ZygoteHandle&) = delete;
  ZygoteHandle& operator=(const ZygoteHandle&) = delete;
  ~ZygoteHandle();

  [[nodiscard]] Status start();
  // Asks for one more prepared child, to run with CUDA_VISIBLE_DEVICES set to
  // `visible_devices` (a GPU's UUID; empty on a CPU server).
  void request_fork(const std::string& visible_devices);
  // Ends the zygote; it kills its children on the way out.
  void stop();
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] bool running() const { return pid_ > 0 && channel_.valid(); }

 private:
  void wait_readable();
  void read_messages();
  void handle(wire::Received received);
  void lost(const std::string& why);

  Strand strand_;
  ZygoteConfig config_;
  Callbacks callbacks_;
  pid_t pid_ = -1;
  Channel channel_;
  boost::asio::posix::stream_descriptor readable_;
  bool ready_ = false;
  std::size_t forks_asked_ = 0;  // not yet answered
};

}  // namespace kcoral
