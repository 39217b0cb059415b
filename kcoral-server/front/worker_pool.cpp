// WorkerPool: the queue, its timeouts, dispatch to idle workers and to the set groups'
// workers forked for awaiting jobs, and draining.
#include "worker_pool.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstdio>

namespace kcoral {

using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point from) {
  return std::chrono::duration<double, std::milli>(Clock::now() - from).count();
}

// The GPUs a job holds at once: its gpu_count, at least one (a CPU server's programs too).
std::size_t gpus_of(const ExecuteJob& job) {
  return std::max<std::size_t>(1, job.admitted.program.options().gpu_count.value_or(1));
}

// "0,1": --gpus indices for a message.
std::string joined(const std::vector<int>& ids) {
  std::string text;
  for (int id : ids) text += (text.empty() ? "" : ",") + std::to_string(id);
  return text;
}

}  // namespace

WorkerPool::WorkerPool(boost::asio::io_context& io, Config config)
    : strand_(boost::asio::make_strand(io)),
      config_(std::move(config)),
      groups_(worker_groups(config_.groups, config_.max_gpus_per_program, config_.cuda_connections)),
      leases_(config_.groups.size(), config_.context_inits_at_once),
      supply_(strand_,
              {groups_, config_.workers_per_group, config_.context_inits_at_once,
               {config_.max_message_bytes, config_.programs_per_worker}, config_.zygote, config_.long_steps},
              leases_,
              {[this](std::map<std::string, std::string> versions) {
                 {
                   std::lock_guard lock(mutex_);
                   versions_ = std::move(versions);
                   ready_ = true;
                 }
                 started_.notify_all();
               },
               [this](const std::string& message) {
                 {
                   std::lock_guard lock(mutex_);
                   startup_error_ = message;  // it never started: the server reports this and exits
                 }
                 started_.notify_all();
               },
               [this](const WorkerPtr& worker) { on_idle(worker); },
               [this](const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job, JobOutcome outcome) {
                 on_finished(worker, std::move(job), std::move(outcome));
               },
               [this](const WorkerPtr& worker) { on_gone(worker); },
               [this](const WorkerSupply::StartEnd& end) { on_start_ended(end); },
               [this] { parent_ready_ = true; }}),
      running_(groups_.size(), 0),
      queue_(config_.tenants, config_.max_queued_per_tenant),
      tenant_load_(queue_.tenants()) {}

WorkerPool::~WorkerPool() { supply_.stop(); }

Status WorkerPool::start() { return supply_.start(); }

std::string WorkerPool::startup_error() const {
  std::lock_guard lock(mutex_);
  return startup_error_;
}

bool WorkerPool::wait_started(std::chrono::steady_clock::duration timeout) const {
  std::unique_lock lock(mutex_);
  started_.wait_for(lock, timeout, [this] { return ready_.load() || !startup_error_.empty(); });
  return ready_.load();
}

void WorkerPool::submit(std::shared_ptr<ExecuteJob> job) {
  boost::asio::post(strand_, [this, job = std::move(job)]() mutable {
    if (draining_) return answer(std::move(job), {fail(ErrorKind::busy, "the server is shutting down"), {}});
    if (!enqueue(job, /*put_back=*/false)) {
      if (config_.tenant_queue_full) config_.tenant_queue_full();
      ResponseTimings timings{ms_since(job->received), 0, 0, 0};
      return answer(std::move(job),
                    {fail(ErrorKind::busy, "you have " + std::to_string(config_.max_queued_per_tenant) +
                                               " programs waiting for a worker already, the most one tenant may "
                                               "(--max-queued-per-tenant); retry once some of them have started"),
                     timings});
    }
    dispatch();
  });
}

bool WorkerPool::enqueue(std::shared_ptr<ExecuteJob> job, bool put_back) {
  auto timer = std::make_unique<boost::asio::steady_timer>(strand_);
  boost::asio::steady_timer& waiting = *timer;  // stays put while its entry moves
  std::size_t tenant = job->tenant;
  Queued queued{job, std::move(timer)};
  if (put_back) queue_.put_back(tenant, std::move(queued));
  else if (!queue_.push(tenant, std::move(queued))) return false;
  queued_gpus_ += gpus_of(*job);
  // The queue timeout counts from the request's arrival, also for a job put back, and
  // goes on while the job awaits a worker of its set group (which may have no room).
  wait_at_most(waiting, job, job->received + seconds_duration(config_.queue_timeout_seconds));
  publish_load();
  return true;
}

// Answers `job` busy at `deadline` unless it has left the queue or the awaiting jobs by then.
void WorkerPool::wait_at_most(boost::asio::steady_timer& timer, const std::shared_ptr<ExecuteJob>& job,
                              Clock::time_point deadline) {
  timer.expires_at(deadline);
  timer.async_wait([this, job](boost::system::error_code ec) {
    if (ec || !withdraw(job)) return;
    want_set_workers();
    publish_load();
    answer(job, {fail(ErrorKind::busy, "no worker became free within the queue timeout of " +
                                           seconds_text(config_.queue_timeout_seconds)),
                 {ms_since(job->received), 0, 0, 0}});
  });
}

WorkerPool::Queued WorkerPool::pop_queued() {
  Queued queued = *queue_.pop();
  queued_gpus_ -= gpus_of(*queued.job);
  return queued;
}

std::vector<WorkerPool::Queued> WorkerPool::take_all_queued() {
  queued_gpus_ = 0;
  return queue_.take_all();
}

std::optional<WorkerPool::Queued> WorkerPool::withdraw(const std::shared_ptr<ExecuteJob>& job) {
  if (auto queued = queue_.take(job->tenant, [&](const Queued& q) { return q.job == job; })) {
    queued_gpus_ -= gpus_of(*job);
    return queued;
  }
  auto awaiting = std::find_if(awaiting_.begin(), awaiting_.end(), [&](const Awaiting& a) { return a.queued.job == job; });
  if (awaiting == awaiting_.end()) return std::nullopt;
  Queued queued = std::move(awaiting->queued);
  awaiting_.erase(awaiting);
  queue_.finished(job->tenant);  // it counted as running for its tenant
  return queued;
}

std::vector<WorkerPool::Queued> WorkerPool::take_all_awaiting() {
  std::vector<Queued> all;
  for (Awaiting& awaiting : awaiting_) {
    queue_.finished(awaiting.queued.job->tenant);
    all.push_back(std::move(awaiting.queued));
  }
  awaiting_.clear();
  return all;
}

void WorkerPool::drain(std::function<void()> drained) {
  boost::asio::post(strand_, [this, drained = std::move(drained)]() mutable {
    draining_ = true;
    drained_ = std::move(drained);
    supply_.stop_forking();
    // Queued jobs and those awaiting a worker: a worker that runs its job already keeps it.
    std::vector<Queued> left = take_all_queued();
    for (Queued& queued : take_all_awaiting()) left.push_back(std::move(queued));
    for (Queued& queued : left) {
      queued.timer->cancel();
      answer(queued.job, {fail(ErrorKind::busy, "the server is shutting down"), {ms_since(queued.job->received), 0, 0, 0}});
    }
    publish_load();
    check_drained();
  });
}

void WorkerPool::abort_running(Error error) {
  boost::asio::post(strand_, [this, error = std::move(error)] {
    for (Queued& queued : take_all_awaiting()) {
      queued.timer->cancel();
      answer(queued.job, {std::unexpected(error), {ms_since(queued.job->received), 0, 0, 0}});
    }
    want_set_workers();
    publish_load();
    supply_.abort_running(error);
  });
}

void WorkerPool::cancel(std::shared_ptr<ExecuteJob> job, Error error) {
  boost::asio::post(strand_, [this, job = std::move(job), error = std::move(error)] {
    auto withdrawn = withdraw(job);
    if (!withdrawn) return supply_.abort_running(error, job.get());
    withdrawn->timer->cancel();
    want_set_workers();
    publish_load();
    answer(job, {std::unexpected(error), {ms_since(job->received), 0, 0, 0}});
  });
}

WorkerPool::Load WorkerPool::load() const {
  return {config_.workers_per_group * config_.groups.size(), running_count_.load(), waiting_count_.load(),
          gpus_running_count_.load(), gpus_waiting_count_.load()};
}

WorkerStarts::Counts WorkerPool::start_counts() const {
  std::lock_guard lock(mutex_);
  return start_counts_;
}

std::vector<WorkerPool::TenantLoad> WorkerPool::tenant_load() const {
  std::lock_guard lock(mutex_);
  return tenant_load_;
}

std::map<std::string, std::string> WorkerPool::versions() const {
  std::lock_guard lock(mutex_);
  return versions_;
}

void WorkerPool::dispatch() {
  // Prepared workers outnumber the running ones (the next is forked while a program
  // runs); at most workers_per_group of a group run at once. A worker runs the programs
  // of one tenant only, that of its first: one of that tenant's if there is one, else a
  // fresh one; a reused worker of another tenant is retired to make room for a fresh one.
  // A program of several GPUs takes no idle worker: it leaves the queue to await one
  // forked for it, and the loop goes on.
  while (!queue_.empty() && !draining_) {
    if (gpus_of(*queue_.peek()->job) > 1) {
      await_worker(pop_queued());
      continue;
    }
    std::size_t tenant = *queue_.next_tenant();  // its turn (FairQueue)
    auto fits = [&](const WorkerPtr& worker) { return running_[worker->group()] < config_.workers_per_group; };
    // The tenant's reused workers first, then its fresh ones (their compile cache mounted
    // ahead), then workers of no tenant yet.
    auto free = std::find_if(idle_.begin(), idle_.end(), [&](const WorkerPtr& worker) {
      return fits(worker) && worker->tenant() == tenant && worker->programs_run() > 0;
    });
    if (free == idle_.end())
      free = std::find_if(idle_.begin(), idle_.end(),
                          [&](const WorkerPtr& worker) { return fits(worker) && worker->tenant() == tenant; });
    if (free == idle_.end())
      free = std::find_if(idle_.begin(), idle_.end(), [&](const WorkerPtr& w) { return fits(w) && !w->tenant(); });
    if (free == idle_.end()) {
      auto other = std::find_if(idle_.begin(), idle_.end(), fits);
      if (other != idle_.end()) {
        WorkerPtr retired = *other;
        idle_.erase(other);
        retired->discard();  // gone: the supply forks a fresh one
      }
      break;
    }
    WorkerPtr worker = *free;
    idle_.erase(free);
    Queued queued = pop_queued();
    queued.timer->cancel();
    run_on(worker, std::move(queued.job));
  }
  // No worker can start: what no idle one took would wait for nothing.
  if (!queue_.empty() && !draining_ && supply_.starts().failing()) refuse_queued(supply_.starts().failing_message());
  want_set_workers();
  publish_load();
  supply_.programs_waiting(!queue_.empty() || !awaiting_.empty());
  supply_.top_up();
}

// The job awaits a worker of the set group of its size whose GPUs are least busy now
// (least_loaded_block); its queue timeout goes on.
void WorkerPool::await_worker(Queued queued) {
  std::size_t gpus = gpus_of(*queued.job);
  auto group = least_loaded_block(groups_, gpus, programs_on_gpus());
  if (!group) {
    // The front admits no more GPUs than there are set groups for; should one come anyway,
    // it is answered rather than kept waiting for a worker that never comes.
    queued.timer->cancel();
    queue_.finished(queued.job->tenant);
    return answer(std::move(queued.job), {fail(ErrorKind::engine, "this server has no workers that hold " +
                                                                      std::to_string(gpus) + " GPUs at once"),
                                          {ms_since(queued.job->received), 0, 0, 0}});
  }
  awaiting_.push_back({std::move(queued), *group});
}

// Asks the supply for a worker per job awaiting each set group, as far as the group has
// room: at most workers_per_group of its jobs run or have their worker on the way, which
// bounds the CUDA contexts a burst of such programs makes on each GPU.
void WorkerPool::want_set_workers() {
  std::vector<std::size_t> awaiting(groups_.size(), 0);
  for (const Awaiting& waiting : awaiting_) ++awaiting[waiting.group];
  for (std::size_t group = 0; group < groups_.size(); ++group) {
    if (!groups_[group].on_demand) continue;
    std::size_t room = config_.workers_per_group - std::min(running_[group], config_.workers_per_group);
    supply_.want(group, std::min(awaiting[group], room));
  }
}

// Per GPU, the programs running on it or awaiting a worker that will hold it.
std::vector<std::size_t> WorkerPool::programs_on_gpus() const {
  std::vector<std::size_t> on_gpu(config_.groups.size(), 0);
  for (std::size_t group = 0; group < groups_.size(); ++group)
    for (std::size_t gpu : groups_[group].gpus) on_gpu.at(gpu) += running_[group];
  for (const Awaiting& waiting : awaiting_)
    for (std::size_t gpu : groups_[waiting.group].gpus) ++on_gpu.at(gpu);
  return on_gpu;
}

// The group's GPUs by their --gpus index, in order; empty on a CPU server.
std::vector<int> WorkerPool::gpu_ids_of(std::size_t group) const {
  std::vector<int> ids;
  for (std::size_t gpu : groups_[group].gpus)
    if (gpu < config_.gpu_ids.size()) ids.push_back(config_.gpu_ids[gpu]);
  return ids;
}

// A per-GPU group's worker waits among the idle ones. A set group's was forked for an
// awaiting job: it runs the first job awaiting its group, or, when that was answered
// meanwhile (cancelled, timed out, drained) or the group has no room (should a start
// outlast the want it was forked for), none and is let go.
void WorkerPool::on_idle(const WorkerPtr& worker) {
  std::size_t group = worker->group();
  if (!groups_[group].on_demand) {
    if (config_.compile_caches != nullptr && config_.tenants == 1 && !worker->tenant()) return attach_ahead(worker);
    idle_.push_back(worker);
    return dispatch();
  }
  auto awaiting =
      std::find_if(awaiting_.begin(), awaiting_.end(), [&](const Awaiting& a) { return a.group == group; });
  if (awaiting == awaiting_.end() || draining_ || running_[group] >= config_.workers_per_group)
    return worker->discard();
  Queued queued = std::move(awaiting->queued);
  awaiting_.erase(awaiting);
  queued.timer->cancel();
  run_on(worker, std::move(queued.job));
  dispatch();
}

// A server of one tenant knows whose a fresh worker's first program will be: the worker is
// bound to that tenant and its compile cache mounted before it counts as idle, so that
// no program waits for the mount: 0.05-0.07 ms, at times 1.4 ms (2-core machine), on a
// thread that mounts and never trims.
// Mounted or not, it is idle afterwards; a failure is said, and its programs use the
// stand-in in their scratch space.
void WorkerPool::attach_ahead(const WorkerPtr& worker) {
  worker->bind(0);
  attach_cache(worker, 0, [this, worker] {
    if (worker->state() == WorkerHandle::State::gone) return;
    idle_.push_back(worker);
    dispatch();
  });
}

// Mounts `tenant`'s compile cache in `worker`, then runs `then` on the strand, whether the
// mount succeeded (a failure is said, and the worker's programs use the stand-in in their
// scratch space) or the worker died meanwhile.
void WorkerPool::attach_cache(const WorkerPtr& worker, std::size_t tenant, std::function<void()> then) {
  config_.compile_caches->attach(worker->pidfd(), worker->pid(), tenant,
                                 [strand = strand_, worker, then = std::move(then)](Status attached) mutable {
                                   // Run only while the pool's strand runs (the pool lives as long).
                                   boost::asio::post(strand, [worker, attached, then = std::move(then)] {
                                     if (!attached && worker->state() != WorkerHandle::State::gone)
                                       std::fprintf(stderr, "kcoral-server: a worker runs without its compile cache: %s\n",
                                                    attached.error().message.c_str());
                                     then();
                                   });
                                 });
}

// Runs `job` on `worker`, once the tenant's compile cache is mounted in a worker that has
// not run a program before (a failure to mount is said, and the program runs with the
// stand-in in its scratch space).
void WorkerPool::run_on(const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job) {
  ++running_[worker->group()];
  bool first = !worker->tenant();
  worker->bind(job->tenant);
  if (!first || config_.compile_caches == nullptr) {
    (void)hand_over(worker, std::move(job));
    return;
  }
  std::size_t tenant = job->tenant;
  attach_cache(worker, tenant, [this, worker, job = std::move(job)]() mutable {
    if (!hand_over(worker, std::move(job))) dispatch();
  });
}

// False when the worker died before it took the job, which is queued again first; after
// kMaxFailedHandOvers such deaths the job fails instead (whatever about it kills its
// workers would kill every next one: each try costs a worker's start).
bool WorkerPool::hand_over(const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job) {
  if (worker->run(job)) return true;
  --running_[worker->group()];
  if (++job->failed_hand_overs >= kMaxFailedHandOvers) {
    answer(job, {fail(ErrorKind::engine, "the program could not be handed to a worker: the last " +
                                             std::to_string(kMaxFailedHandOvers) +
                                             " workers given it died taking it (its blobs, say, in more memory "
                                             "files than a worker may hold)"),
                 {ms_since(job->received), 0, 0, 0}});
    return false;
  }
  (void)enqueue(std::move(job), /*put_back=*/true);  // that worker died; the next one takes it
  return false;
}

void WorkerPool::refuse_queued(const std::string& why) {
  for (Queued& queued : take_all_queued()) {
    queued.timer->cancel();
    answer(queued.job, {fail(ErrorKind::engine, why), {ms_since(queued.job->received), 0, 0, 0}});
  }
}

void WorkerPool::on_start_ended(const WorkerSupply::StartEnd& end) {
  const WorkerStarts& starts = supply_.starts();
  {
    std::lock_guard lock(mutex_);
    start_counts_ = starts.counts();
  }
  if (end.failure && config_.start_failed) config_.start_failed(end, starts.failures_in_row(end.group));
  if (end.failure && groups_[end.group].on_demand) on_set_start_failed(end);
  if (starts.failing() != failing_) {
    failing_ = starts.failing();
    if (config_.failing_changed) config_.failing_changed(failing_, failing_ ? starts.failing_message() : "");
  }
  if (failing_) dispatch();
}

// A start for a job awaiting a set group failed: the first job awaiting that group is
// answered with why (the group's starts, as its workers, are interchangeable). A worker
// that cannot start on these GPUs now would most likely fail the next program too.
void WorkerPool::on_set_start_failed(const WorkerSupply::StartEnd& end) {
  auto awaiting = std::find_if(awaiting_.begin(), awaiting_.end(),
                               [&](const Awaiting& a) { return a.group == end.group; });
  if (awaiting == awaiting_.end()) return;  // its job was answered meanwhile
  Queued queued = std::move(awaiting->queued);
  awaiting_.erase(awaiting);
  queued.timer->cancel();
  queue_.finished(queued.job->tenant);
  std::vector<int> ids = gpu_ids_of(end.group);
  std::string gpus = std::to_string(groups_[end.group].gpus.size()) + " GPUs" +
                     (ids.empty() ? std::string() : " (--gpus " + joined(ids) + ")");
  std::string worker = queued.job->ran_again ? "the worker of CUDA's default queues that was to run this program "
                                               "again (a benchmark() call of it ran on several streams)"
                                             : "the worker for this program's " + gpus;
  answer(queued.job, {fail(ErrorKind::engine, worker + " failed to start: " + *end.failure),
                      {ms_since(queued.job->received), 0, 0, 0}});
  dispatch();
}

void WorkerPool::on_finished(const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job, JobOutcome outcome) {
  --running_[worker->group()];
  if (config_.compile_caches != nullptr) config_.compile_caches->trim(job->tenant);
  // Once, and only from a one-queue worker: a worker can say anything, and a program
  // that says it of itself only makes its own tenant wait.
  std::optional<std::size_t> rerun = groups_[worker->group()].rerun_group;
  if (outcome.multi_stream && rerun && !job->ran_again) {
    if (!draining_) {
      run_again(std::move(job), *rerun);
      return dispatch();
    }
    outcome.result = fail(ErrorKind::busy, "the server is shutting down: this program was to run again on a worker "
                                           "of CUDA's default queues (a benchmark() call of it ran on several streams)");
  }
  queue_.finished(job->tenant);
  outcome.gpu_ids = gpu_ids_of(worker->group());
  publish_load();
  answer(std::move(job), std::move(outcome));
  if (draining_) return check_drained();
  dispatch();
}

// The job runs again, on a worker of `group` (a rerun group) forked for it, as a set
// group's job does: it still counts as running for its tenant, and waits for that worker
// at most the queue timeout, counted anew.
void WorkerPool::run_again(std::shared_ptr<ExecuteJob> job, std::size_t group) {
  job->ran_again = true;
  if (job->answer_held) job->answer_held->release();  // the first run's answer is dropped
  auto timer = std::make_unique<boost::asio::steady_timer>(strand_);
  wait_at_most(*timer, job, Clock::now() + seconds_duration(config_.queue_timeout_seconds));
  awaiting_.push_back({{std::move(job), std::move(timer)}, group});
  want_set_workers();
  publish_load();
}

void WorkerPool::on_gone(const WorkerPtr& worker) {
  std::erase(idle_, worker);
  publish_load();
}

void WorkerPool::answer(std::shared_ptr<ExecuteJob> job, JobOutcome outcome) {
  auto done = std::move(job->done);
  done(std::move(job), std::move(outcome));
}

void WorkerPool::publish_load() {
  std::size_t running = awaiting_.size();
  std::size_t gpus_running = 0;
  for (const Awaiting& waiting : awaiting_) gpus_running += groups_[waiting.group].gpus.size();
  for (std::size_t group = 0; group < groups_.size(); ++group) {
    running += running_[group];
    gpus_running += running_[group] * groups_[group].gpus.size();  // a CPU server's one group: {0}
  }
  running_count_ = running;
  gpus_running_count_ = gpus_running;
  waiting_count_ = queue_.size();
  gpus_waiting_count_ = queued_gpus_;
  std::lock_guard lock(mutex_);
  for (std::size_t tenant = 0; tenant < tenant_load_.size(); ++tenant)
    tenant_load_[tenant] = {queue_.running(tenant), queue_.waiting(tenant)};
}

void WorkerPool::check_drained() {
  if (!draining_ || running_count_ > 0 || !drained_) return;
  supply_.stop();
  auto drained = std::move(drained_);
  drained_ = nullptr;
  drained();
}

}  // namespace kcoral
