// WorkerPool: the front's queue of accepted programs, matched to prepared workers.
//
// A job waits in its tenant's queue until a worker of a group with room is idle, for at
// most the queue timeout (then: busy); tenants share the workers (FairQueue: the tenant
// with the fewest running goes first, each tenant's programs in their order), and a tenant
// with its most programs waiting has the next one refused as busy. The workers themselves come from the
// WorkerSupply and speak through their WorkerHandle (which runs the job: delivery,
// deadline, crash attribution); the GPU leases they ask for go through the LeaseBroker.
// The pool is ready once the supply's start trial has passed (the first worker of every
// group is alive). While no worker can start (WorkerStarts::failing: every group's last
// starts failed), jobs that no idle worker takes are answered `engine` at once, with the
// workers' failure, instead of waiting for the queue timeout.
// Every mutation happens on the pool's strand; submit(), drain(), load(), versions(),
// ready() and startup_error() may be called from any thread. A job's `done` runs on the
// strand and must hand heavy work (encoding the response) elsewhere.
//
//   WorkerPool pool(io, config);
//   pool.start();
//   pool.submit(job);   // job->done(job, outcome) later, exactly once
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "compile_caches.hpp"
#include "execute_job.hpp"
#include "fair_queue.hpp"
#include "lease_broker.hpp"
#include "worker_supply.hpp"

namespace kcoral {

class WorkerPool {
 public:
  struct Config {
    std::size_t workers_per_group = 1;
    // One group per entry: the CUDA_VISIBLE_DEVICES value (a GPU's UUID) of its workers;
    // a single empty entry on a CPU server.
    std::vector<std::string> groups{""};
    // Each group's GPU by its --gpus index, which the responses name; empty on a CPU server.
    std::vector<int> gpu_ids;
    std::size_t programs_per_worker = 1;  // 1: a fresh process for every program
    // GPU: workers of one GPU that make their CUDA context at the same time. Contexts take
    // a quarter second or more to make; with fresh workers this bounds programs/s.
    std::size_t context_inits_at_once = 1;
    double queue_timeout_seconds = 1800;
    std::size_t tenants = 1;                // jobs' tenants are 0 to tenants - 1
    std::size_t max_queued_per_tenant = 256;
    // Called on the strand each time a job is refused for its tenant's full queue.
    std::function<void()> tenant_queue_full;
    // Called on the strand for each worker start that failed (the event log, the server's
    // output), with the failures in a row of its group, and when no worker can start any
    // more (`failing`) or can again.
    std::function<void(const WorkerSupply::StartEnd&, std::size_t failures_in_row)> start_failed;
    std::function<void(bool failing, const std::string& why)> failing_changed;
    std::size_t max_message_bytes = std::size_t{1} << 30;  // a worker's largest frame
    // Each tenant's compile cache, mounted into a worker before its first program and
    // trimmed after each program; null: none. Outlives the pool.
    CompileCaches* compile_caches = nullptr;
    ZygoteConfig zygote;
  };
  struct Load {
    std::size_t capacity = 0;
    std::size_t running = 0;
    std::size_t waiting = 0;
  };
  struct TenantLoad {
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
  // Kills the programs running now; each is answered with `error` (drain's end comes sooner).
  void abort_running(Error error);
  // The job's client went away: a queued job leaves the queue, a running one is killed;
  // either is answered with `error` (a finished one is left alone).
  void cancel(std::shared_ptr<ExecuteJob> job, Error error);

  [[nodiscard]] Load load() const;
  // The workers' starts so far, by outcome, and whether none can start now.
  [[nodiscard]] WorkerStarts::Counts start_counts() const;
  [[nodiscard]] std::vector<TenantLoad> tenant_load() const;  // by tenant
  [[nodiscard]] std::map<std::string, std::string> versions() const;
  [[nodiscard]] bool ready() const { return ready_.load(); }
  // Whether the worker parent is up (ready() also waits for the first workers).
  [[nodiscard]] bool parent_ready() const { return parent_ready_.load(); }
  // Why the workers cannot start, once that is known (empty until then).
  [[nodiscard]] std::string startup_error() const;
  // Blocks until the pool is ready or its start has failed, at most `timeout`: ready().
  [[nodiscard]] bool wait_started(std::chrono::steady_clock::duration timeout) const;

 private:
  struct Queued {
    std::shared_ptr<ExecuteJob> job;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };

  // False when the job's tenant has its most waiting (never for a job put back).
  [[nodiscard]] bool enqueue(std::shared_ptr<ExecuteJob> job, bool put_back);
  void dispatch();
  void on_finished(const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job, JobOutcome outcome);
  void on_gone(const WorkerPtr& worker);
  void on_start_ended(const WorkerSupply::StartEnd& end);
  void refuse_queued(const std::string& why);
  void run_on(const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job);
  [[nodiscard]] bool hand_over(const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job);
  void answer(std::shared_ptr<ExecuteJob> job, JobOutcome outcome);
  void publish_load();
  void check_drained();

  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  Config config_;
  LeaseBroker leases_;
  WorkerSupply supply_;

  std::deque<WorkerPtr> idle_;
  std::vector<std::size_t> running_;  // per group
  FairQueue<Queued> queue_;
  bool draining_ = false;
  std::function<void()> drained_;

  std::atomic<bool> ready_{false};
  std::atomic<bool> parent_ready_{false};
  bool failing_ = false;  // as last told to failing_changed
  std::atomic<std::size_t> running_count_{0};
  std::atomic<std::size_t> waiting_count_{0};
  mutable std::mutex mutex_;  // for the three below, and ready_'s change
  mutable std::condition_variable started_;  // ready_ or startup_error_ set
  std::map<std::string, std::string> versions_;
  std::string startup_error_;
  std::vector<TenantLoad> tenant_load_;
  WorkerStarts::Counts start_counts_;
};

}  // namespace kcoral
