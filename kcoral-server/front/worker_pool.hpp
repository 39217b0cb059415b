// WorkerPool: the front's queue of accepted programs, matched to prepared workers.
//
// A job waits in its tenant's queue until a worker of a group with room is idle, for at
// most the queue timeout (then: busy); tenants share the workers (FairQueue: the tenant
// with the fewest running goes first, each tenant's programs in their order), and a tenant
// with its most programs waiting has the next one refused as busy. The workers themselves come from the
// WorkerSupply and speak through their WorkerHandle (which runs the job: delivery,
// deadline, crash attribution); the GPU leases they ask for go through the LeaseBroker.
// The pool is ready once the supply's start trial has passed (the first worker of every
// prepared group is alive). While no worker can start (WorkerStarts::failing: every
// prepared group's last starts failed), jobs that no idle worker takes are answered
// `engine` at once, with the workers' failure, instead of waiting for the queue timeout.
//
// A program of several GPUs (options.gpu_count n > 1) runs in a worker of a set group
// (WorkerGroups), which sees n GPUs and leases all n at once. When its turn comes, the
// job leaves the queue (running for its tenant from then on) and awaits a worker of the
// block of n GPUs least busy now, which the supply forks for it; the loop goes on with the
// next jobs meanwhile, so programs of one GPU are not held up by that start (a fork and n
// CUDA contexts). A set group's worker runs the first job awaiting its group, and none
// other; a failed start answers the first job awaiting its group `engine` with the reason.
// At most workers_per_group jobs of a set group run or have a worker starting at once;
// further ones await a place, their queue timeout still running.
// With one-queue workers (--cuda-connections auto), a program whose benchmark() refused a
// call that ran on several streams (JobOutcome::multi_stream) runs again, once, as a set
// group's program does: on a worker of its GPU's rerun group (CUDA's default queues)
// forked for it; its first result is dropped.
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
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compile_caches.hpp"
#include "execute_job.hpp"
#include "fair_queue.hpp"
#include "lease_broker.hpp"
#include "worker_groups.hpp"
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
    // The most GPUs one program may hold: from 2 on, set groups of that many GPUs and
    // fewer are made (WorkerGroups). 1 on a CPU server.
    std::size_t max_gpus_per_program = 1;
    std::size_t programs_per_worker = 1;  // 1: a fresh process for every program
    // GPU: workers of one GPU that make their CUDA context at the same time. Contexts take
    // a quarter second or more to make; with fresh workers this bounds programs/s.
    std::size_t context_inits_at_once = 1;
    // The hardware queues of the workers' CUDA contexts (worker_groups.hpp): nullopt for
    // one queue and a rerun group per GPU (--cuda-connections auto); else CUDA_DEVICE_MAX_CONNECTIONS
    // (0: CUDA's default). Only 0 on a CPU server.
    std::optional<int> cuda_connections = 0;
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
    // Where a worker's frames of a megabyte or more are decoded, off the strand
    // (WorkerHandle); null: on it. Outlives the pool's workers.
    boost::asio::thread_pool* long_steps = nullptr;
  };
  struct Load {
    std::size_t capacity = 0;  // workers of the prepared groups that may run at once
    std::size_t running = 0;   // jobs running, or awaiting a worker started for them
    std::size_t waiting = 0;   // jobs in the queue
    // The same weighted by GPUs: a program counts its gpu_count, at least 1 (on a CPU
    // server, as running and waiting).
    std::size_t gpus_running = 0;
    std::size_t gpus_waiting = 0;
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
  // Kills the programs running now; each is answered with `error` (drain's end comes
  // sooner), as is each job awaiting a worker.
  void abort_running(Error error);
  // The job's client went away: a queued job leaves the queue, one awaiting a worker stops
  // waiting, a running one is killed; each is answered with `error` (a finished one is
  // left alone).
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
    std::unique_ptr<boost::asio::steady_timer> timer;  // the queue timeout
  };
  // A job out of the queue, waiting for a worker of its set group.
  struct Awaiting {
    Queued queued;
    std::size_t group = 0;
  };

  // False when the job's tenant has its most waiting (never for a job put back).
  [[nodiscard]] bool enqueue(std::shared_ptr<ExecuteJob> job, bool put_back);
  void wait_at_most(boost::asio::steady_timer& timer, const std::shared_ptr<ExecuteJob>& job,
                    std::chrono::steady_clock::time_point deadline);
  void run_again(std::shared_ptr<ExecuteJob> job, std::size_t group);
  [[nodiscard]] Queued pop_queued();
  [[nodiscard]] std::vector<Queued> take_all_queued();
  // Takes `job` out of the queue or the awaiting jobs, whichever holds it.
  [[nodiscard]] std::optional<Queued> withdraw(const std::shared_ptr<ExecuteJob>& job);
  [[nodiscard]] std::vector<Queued> take_all_awaiting();
  void dispatch();
  void await_worker(Queued queued);
  void want_set_workers();
  [[nodiscard]] std::vector<std::size_t> programs_on_gpus() const;
  [[nodiscard]] std::vector<int> gpu_ids_of(std::size_t group) const;
  void on_idle(const WorkerPtr& worker);
  void attach_ahead(const WorkerPtr& worker);
  void attach_cache(const WorkerPtr& worker, std::size_t tenant, std::function<void()> then);
  void on_set_start_failed(const WorkerSupply::StartEnd& end);
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
  std::vector<WorkerGroup> groups_;  // the per-GPU groups, then the set groups
  LeaseBroker leases_;
  WorkerSupply supply_;

  std::deque<WorkerPtr> idle_;  // of the per-GPU groups; a set group's worker is never idle here
  std::vector<std::size_t> running_;  // per group
  FairQueue<Queued> queue_;
  std::size_t queued_gpus_ = 0;   // the GPUs the queued jobs ask for
  std::deque<Awaiting> awaiting_;  // in the order they left the queue
  bool draining_ = false;
  std::function<void()> drained_;

  std::atomic<bool> ready_{false};
  std::atomic<bool> parent_ready_{false};
  bool failing_ = false;  // as last told to failing_changed
  std::atomic<std::size_t> running_count_{0};
  std::atomic<std::size_t> waiting_count_{0};
  std::atomic<std::size_t> gpus_running_count_{0};
  std::atomic<std::size_t> gpus_waiting_count_{0};
  mutable std::mutex mutex_;  // for the three below, and ready_'s change
  mutable std::condition_variable started_;  // ready_ or startup_error_ set
  std::map<std::string, std::string> versions_;
  std::string startup_error_;
  std::vector<TenantLoad> tenant_load_;
  WorkerStarts::Counts start_counts_;
};

}  // namespace kcoral
