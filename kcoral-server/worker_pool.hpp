// WorkerPool: the front's queue of accepted programs and the worker processes that run
// them, one fresh process per program.
//
// The pool keeps as many prepared children as it has capacity, forked ahead of time by
// the zygote, so a program starts on a process that is already up. A job waits in the
// queue for at most the queue timeout (then: busy); a running job that passes its
// deadline has its worker's process tree killed (then: timeout); a worker that dies
// mid-program fails the instruction it was running. Every mutation happens on the
// pool's strand; submit(), drain(), load() and versions() may be called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "execute_job.hpp"
#include "kcoral/lease_manager.hpp"
#include "zygote.hpp"

namespace kcoral {

class WorkerPool {
 public:
  struct Config {
    std::size_t capacity = 1;
    double queue_timeout_seconds = 1800;
    ZygoteConfig zygote;
  };
  struct Load {
    std::size_t capacity = 0;
    std::size_t running = 0;
    std::size_t waiting = 0;
  };

  WorkerPool(boost::asio::io_context& io, Config config);
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool();

  [[nodiscard]] Status start();
  void submit(std::shared_ptr<ExecuteJob> job);
  // Refuses queued and new jobs, lets running ones finish, stops the workers, then calls
  // `drained` (on the strand).
  void drain(std::function<void()> drained);

  [[nodiscard]] Load load() const;
  [[nodiscard]] std::map<std::string, std::string> versions() const;
  [[nodiscard]] bool ready() const { return ready_.load(); }

 private:
  struct Worker;
  struct Queued {
    std::shared_ptr<ExecuteJob> job;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  using WorkerPtr = std::shared_ptr<Worker>;

  void on_forked(pid_t pid, UniqueFd channel);
  void on_exited(pid_t pid, const std::string& how);
  void on_zygote_failed(const std::string& message);
  void top_up();
  void dispatch();
  void start_job(const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job);
  void read_worker(const WorkerPtr& worker);
  void handle_message(const WorkerPtr& worker, Message message);
  void worker_closed(const WorkerPtr& worker);
  void finish(const WorkerPtr& worker, Result<ProgramResult> result);
  void crashed(const WorkerPtr& worker, const std::string& how);
  void forget(const WorkerPtr& worker);
  void publish_load();
  void check_drained();

  boost::asio::io_context& io_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  Config config_;
  std::unique_ptr<Zygote> zygote_;
  boost::asio::steady_timer restart_timer_;

  std::map<pid_t, WorkerPtr> workers_;  // every live child we know of
  std::deque<WorkerPtr> idle_;
  std::size_t running_ = 0;
  std::size_t pending_forks_ = 0;
  std::list<Queued> queue_;
  bool draining_ = false;
  std::function<void()> drained_;

  std::atomic<bool> ready_{false};
  std::atomic<std::size_t> running_count_{0};
  std::atomic<std::size_t> waiting_count_{0};
  mutable std::mutex versions_mutex_;
  std::map<std::string, std::string> versions_;
};

}  // namespace kcoral
