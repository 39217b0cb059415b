// WorkerPool: the queue, its timeouts, dispatch to idle workers, and draining.
#include "worker_pool.hpp"

#include <boost/asio/post.hpp>
#include <cstdio>
#include <numeric>

namespace kcoral {

using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point from) {
  return std::chrono::duration<double, std::milli>(Clock::now() - from).count();
}

}  // namespace

WorkerPool::WorkerPool(boost::asio::io_context& io, Config config)
    : strand_(boost::asio::make_strand(io)),
      config_(std::move(config)),
      leases_(config_.groups.size(), config_.context_inits_at_once),
      supply_(strand_,
              {config_.groups, config_.workers_per_group, config_.context_inits_at_once,
               {config_.max_message_bytes, config_.programs_per_worker}, config_.zygote},
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
               [this](const WorkerPtr& worker) {
                 idle_.push_back(worker);
                 dispatch();
               },
               [this](const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job, JobOutcome outcome) {
                 on_finished(worker, std::move(job), std::move(outcome));
               },
               [this](const WorkerPtr& worker) { on_gone(worker); },
               [this](const WorkerSupply::StartEnd& end) { on_start_ended(end); },
               [this] { parent_ready_ = true; }}),
      running_(config_.groups.size(), 0),
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
  // The queue timeout counts from the request's arrival, also for a job put back.
  waiting.expires_at(job->received + seconds_duration(config_.queue_timeout_seconds));
  waiting.async_wait([this, job](boost::system::error_code ec) {
    if (ec) return;
    if (!queue_.take(job->tenant, [&](const Queued& q) { return q.job == job; })) return;
    publish_load();
    answer(job, {fail(ErrorKind::busy, "no worker became free within the queue timeout of " +
                                           seconds_text(config_.queue_timeout_seconds)),
                 {ms_since(job->received), 0, 0, 0}});
  });
  publish_load();
  return true;
}

void WorkerPool::drain(std::function<void()> drained) {
  boost::asio::post(strand_, [this, drained = std::move(drained)]() mutable {
    draining_ = true;
    drained_ = std::move(drained);
    supply_.stop_forking();
    for (Queued& queued : queue_.take_all()) {
      queued.timer->cancel();
      answer(queued.job, {fail(ErrorKind::busy, "the server is shutting down"), {ms_since(queued.job->received), 0, 0, 0}});
    }
    publish_load();
    check_drained();
  });
}

void WorkerPool::abort_running(Error error) {
  boost::asio::post(strand_, [this, error = std::move(error)] { supply_.abort_running(error); });
}

void WorkerPool::cancel(std::shared_ptr<ExecuteJob> job, Error error) {
  boost::asio::post(strand_, [this, job = std::move(job), error = std::move(error)] {
    auto queued = queue_.take(job->tenant, [&](const Queued& q) { return q.job == job; });
    if (!queued) return supply_.abort_running(error, job.get());
    queued->timer->cancel();
    publish_load();
    answer(job, {std::unexpected(error), {ms_since(job->received), 0, 0, 0}});
  });
}

WorkerPool::Load WorkerPool::load() const {
  return {config_.workers_per_group * config_.groups.size(), running_count_.load(), waiting_count_.load()};
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
  while (!queue_.empty() && !draining_) {
    std::size_t tenant = *queue_.next_tenant();  // its turn (FairQueue)
    auto fits = [&](const WorkerPtr& worker) { return running_[worker->group()] < config_.workers_per_group; };
    auto free = std::find_if(idle_.begin(), idle_.end(),
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
    Queued queued = *queue_.pop();
    queued.timer->cancel();
    run_on(worker, std::move(queued.job));
  }
  // No worker can start: what no idle one took would wait for nothing.
  if (!queue_.empty() && !draining_ && supply_.starts().failing()) refuse_queued(supply_.starts().failing_message());
  publish_load();
  supply_.top_up();
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
  config_.compile_caches->attach(worker->pidfd(), worker->pid(), tenant,
                                 [this, strand = strand_, worker, job = std::move(job)](Status attached) mutable {
                                   // Run only while the pool's strand runs (the pool lives as long).
                                   boost::asio::post(strand, [this, worker, job = std::move(job), attached]() mutable {
                                     if (!attached && worker->state() != WorkerHandle::State::gone)
                                       std::fprintf(stderr, "kcoral-server: a program runs without its compile cache: %s\n",
                                                    attached.error().message.c_str());
                                     if (!hand_over(worker, std::move(job))) dispatch();
                                   });
                                 });
}

// False when the worker died before it took the job, which is queued again first.
bool WorkerPool::hand_over(const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job) {
  if (worker->run(job)) return true;
  --running_[worker->group()];
  (void)enqueue(std::move(job), /*put_back=*/true);  // that worker died; the next one takes it
  return false;
}

void WorkerPool::refuse_queued(const std::string& why) {
  for (Queued& queued : queue_.take_all()) {
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
  if (starts.failing() != failing_) {
    failing_ = starts.failing();
    if (config_.failing_changed) config_.failing_changed(failing_, failing_ ? starts.failing_message() : "");
  }
  if (failing_) dispatch();
}

void WorkerPool::on_finished(const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job, JobOutcome outcome) {
  --running_[worker->group()];
  queue_.finished(job->tenant);
  if (config_.compile_caches != nullptr) config_.compile_caches->trim(job->tenant);
  if (worker->group() < config_.gpu_ids.size()) outcome.gpu_ids = {config_.gpu_ids[worker->group()]};
  publish_load();
  answer(std::move(job), std::move(outcome));
  if (draining_) return check_drained();
  dispatch();
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
  running_count_ = std::accumulate(running_.begin(), running_.end(), std::size_t{0});
  waiting_count_ = queue_.size();
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
