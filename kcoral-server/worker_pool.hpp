// WorkerPool: the front's queue of accepted programs and the worker processes that run
// them, a fresh process per program by default.
//
// Workers come in groups: one per GPU on a GPU server (each worker pinned to its GPU by
// UUID), a single group on a CPU server. The pool keeps each group's prepared children
// at its size, forked ahead of time by the zygote, so a program starts on a process that
// is already up. It also brokers the GPU leases its workers ask for: the program lease
// (first come first served, handed straight to the longest waiter) and the turns in
// which new workers make their CUDA contexts, a bounded number at a time per GPU. A job waits in the
// queue for at most the queue timeout (then: busy); a running job that passes its
// deadline, lease waiting not counted, has its worker's process tree killed (then:
// timeout); a worker that dies mid-program fails the instruction it was running and its
// leases return. Every mutation happens on the pool's strand; submit(), drain(), load()
// and versions() may be called from any thread.
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
#include <vector>

#include "execute_job.hpp"
#include "kcoral/lease_manager.hpp"
#include "pool_worker.hpp"
#include "zygote.hpp"

namespace kcoral {

class WorkerPool {
 public:
  struct Config {
    std::size_t workers_per_group = 1;
    // One group per entry: the CUDA_VISIBLE_DEVICES value (a GPU's UUID) of its workers;
    // a single empty entry on a CPU server.
    std::vector<std::string> groups{""};
    std::size_t programs_per_worker = 1;  // 1: a fresh process for every program
    // GPU: workers of one GPU that make their CUDA context at the same time. Contexts take
    // a quarter second or more to make; with fresh workers this bounds programs/s.
    std::size_t context_inits_at_once = 1;
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
  // Why the workers cannot start, once that is known (empty until then).
  [[nodiscard]] std::string startup_error() const;

 private:
  struct Queued {
    std::shared_ptr<ExecuteJob> job;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };

  void enqueue(std::shared_ptr<ExecuteJob> job, bool front);
  void on_forked(pid_t pid, UniqueFd channel);
  void on_exited(pid_t pid, const std::string& how);
  void on_zygote_failed(const std::string& message);
  void top_up();
  void dispatch();
  void start_job(const PoolWorkerPtr& worker, std::shared_ptr<ExecuteJob> job);
  void read_worker(const PoolWorkerPtr& worker);
  void handle_message(const PoolWorkerPtr& worker, Message message);
  void handle_lease(const PoolWorkerPtr& worker, bool acquire);
  void handle_init_lease(const PoolWorkerPtr& worker, bool acquire);
  void grant(const PoolWorkerPtr& worker, bool resume_deadline);
  void worker_closed(const PoolWorkerPtr& worker);
  void finish(const PoolWorkerPtr& worker, Result<ProgramResult> result);
  void crashed(const PoolWorkerPtr& worker, const std::string& how);
  void forget(const PoolWorkerPtr& worker);
  void publish_load();
  void check_drained();

  boost::asio::io_context& io_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  Config config_;
  std::unique_ptr<Zygote> zygote_;
  boost::asio::steady_timer restart_timer_;
  LeaseManager program_leases_;  // per group (GPU)
  // Per group: workers making their CUDA context now, and those waiting to.
  std::vector<std::size_t> inits_running_;
  std::vector<std::deque<PoolWorkerPtr>> inits_waiting_;

  std::map<pid_t, PoolWorkerPtr> workers_;  // every live child we know of
  std::deque<PoolWorkerPtr> idle_;
  std::deque<std::size_t> pending_forks_;  // the group of each fork asked for, in order
  std::size_t running_ = 0;
  std::list<Queued> queue_;
  bool draining_ = false;
  std::function<void()> drained_;

  std::atomic<bool> ready_{false};
  std::atomic<std::size_t> running_count_{0};
  std::atomic<std::size_t> waiting_count_{0};
  mutable std::mutex mutex_;  // for the two below
  std::map<std::string, std::string> versions_;
  std::string startup_error_;
};

}  // namespace kcoral
