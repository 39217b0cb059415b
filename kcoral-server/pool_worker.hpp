// PoolWorker: the front's handle on one worker child — its channel, the job it runs, and
// that job's deadline, which stops while the child waits for the GPU lease (lease
// waiting does not count against a program's timeout). Used on the pool's strand only.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "channel.hpp"
#include "execute_job.hpp"

namespace kcoral {

struct PoolWorker {
  using Clock = std::chrono::steady_clock;

  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;
  // Timers and the descriptor run their handlers on `strand`, the pool's.
  PoolWorker(Strand strand, pid_t pid, std::size_t group, UniqueFd socket);

  // Arms the deadline for the job's whole timeout; `expired` runs when it passes.
  void start_deadline(double timeout_seconds, std::function<void()> expired);
  // Stops the clock while the program waits for the GPU lease, and restarts it.
  void pause_deadline();
  void resume_deadline();
  void cancel_timers();
  // SIGKILL to the child's process group (it leads its own) and to the child.
  void kill_tree() const;

  pid_t pid;
  std::size_t group;  // the GPU (index into the pool's GPUs) or 0 on a CPU server
  Channel channel;
  boost::asio::posix::stream_descriptor readable;
  bool ready = false;
  bool closed = false;
  bool continues = false;  // the child will take another program after this one
  bool making_context = false;  // holds one of its GPU's context-making turns
  std::shared_ptr<ExecuteJob> job;
  Clock::time_point dispatched;
  std::optional<std::size_t> progress;  // the instruction now running
  std::vector<UniqueFd> parts;          // result parts sent ahead of the result
  std::optional<std::string> interfered_request_id;  // whose lease a cpu_only call broke
  boost::asio::steady_timer grace;  // after a crash: time for the zygote to say how it died

 private:
  void arm(Clock::duration remaining);

  boost::asio::steady_timer deadline_;
  std::function<void()> expired_;
  Clock::time_point deadline_at_;
  std::optional<Clock::duration> paused_remaining_;
};

using PoolWorkerPtr = std::shared_ptr<PoolWorker>;

}  // namespace kcoral
