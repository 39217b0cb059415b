// WorkerPool: queue, prepared children, leases, deadlines and crash attribution.
#include "worker_pool.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kcoral/remove_tree.hpp"
#include "worker_protocol.hpp"

namespace kcoral {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

namespace {

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << seconds << " s";
  return out.str();
}

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

WorkerPool::WorkerPool(boost::asio::io_context& io, Config config)
    : io_(io),
      strand_(boost::asio::make_strand(io)),
      config_(std::move(config)),
      restart_timer_(strand_),
      program_leases_(config_.groups.size()),
      inits_running_(config_.groups.size(), 0),
      inits_waiting_(config_.groups.size()) {}

WorkerPool::~WorkerPool() {
  for (auto& [pid, worker] : workers_) worker->kill_tree();
}

Status WorkerPool::start() {
  std::error_code ec;
  std::filesystem::create_directories(config_.zygote.work_root, ec);
  zygote_ = std::make_unique<Zygote>(
      strand_, config_.zygote,
      Zygote::Callbacks{
          [this](std::map<std::string, std::string> versions) {
            {
              std::lock_guard lock(mutex_);
              versions_ = std::move(versions);
            }
            ready_ = true;
            top_up();
          },
          [this](pid_t pid, UniqueFd channel) { on_forked(pid, std::move(channel)); },
          [this](pid_t pid, std::string how) { on_exited(pid, how); },
          [this](std::string message) { on_zygote_failed(message); }});
  return zygote_->start();
}

std::string WorkerPool::startup_error() const {
  std::lock_guard lock(mutex_);
  return startup_error_;
}

void WorkerPool::submit(std::shared_ptr<ExecuteJob> job) {
  boost::asio::post(strand_, [this, job = std::move(job)]() mutable {
    if (draining_) {
      job->done({fail(ErrorKind::busy, "the server is shutting down"), {}});
      return;
    }
    enqueue(std::move(job), /*front=*/false);
    dispatch();
  });
}

void WorkerPool::enqueue(std::shared_ptr<ExecuteJob> job, bool front) {
  auto timer = std::make_unique<boost::asio::steady_timer>(strand_);
  // The queue timeout counts from the request's arrival, also for a job put back.
  timer->expires_at(job->received + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(config_.queue_timeout_seconds)));
  timer->async_wait([this, job](boost::system::error_code ec) {
    if (ec) return;
    auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Queued& q) { return q.job == job; });
    if (it == queue_.end()) return;
    queue_.erase(it);
    publish_load();
    job->done({fail(ErrorKind::busy, "no worker became free within the queue timeout of " +
                                         seconds_text(config_.queue_timeout_seconds)),
               {ms_between(job->received, Clock::now()), 0, 0, 0}});
  });
  Queued queued{std::move(job), std::move(timer)};
  if (front) queue_.push_front(std::move(queued));
  else queue_.push_back(std::move(queued));
  publish_load();
}

void WorkerPool::drain(std::function<void()> drained) {
  boost::asio::post(strand_, [this, drained = std::move(drained)]() mutable {
    draining_ = true;
    drained_ = std::move(drained);
    for (Queued& queued : queue_) {
      queued.timer->cancel();
      queued.job->done({fail(ErrorKind::busy, "the server is shutting down"),
                        {ms_between(queued.job->received, Clock::now()), 0, 0, 0}});
    }
    queue_.clear();
    publish_load();
    check_drained();
  });
}

WorkerPool::Load WorkerPool::load() const {
  return {config_.workers_per_group * config_.groups.size(), running_count_.load(), waiting_count_.load()};
}

std::map<std::string, std::string> WorkerPool::versions() const {
  std::lock_guard lock(mutex_);
  return versions_;
}

void WorkerPool::on_forked(pid_t pid, UniqueFd channel) {
  std::size_t group = 0;
  if (!pending_forks_.empty()) {
    group = pending_forks_.front();  // the zygote answers fork requests in order
    pending_forks_.pop_front();
  }
  auto worker = std::make_shared<PoolWorker>(strand_, pid, group, std::move(channel));
  workers_[pid] = worker;
  read_worker(worker);
}

void WorkerPool::on_exited(pid_t pid, const std::string& how) {
  auto it = workers_.find(pid);
  if (it == workers_.end()) return;
  PoolWorkerPtr worker = it->second;
  // The zygote's notice can overtake the child's last messages (its result, say), which
  // are still in the child's channel: read those first.
  while (!worker->closed && worker->job) {
    auto message = worker->channel.receive();
    if (!message || !*message) break;
    handle_message(worker, std::move(**message));
  }
  if (worker->job) crashed(worker, how);
  else if (workers_.contains(pid)) forget(worker);
}

void WorkerPool::on_zygote_failed(const std::string& message) {
  std::fprintf(stderr, "kcoral-server: worker parent failed: %s\n", message.c_str());
  pending_forks_.clear();
  if (!ready_) {
    std::lock_guard lock(mutex_);
    startup_error_ = message;
    return;  // it never started: the server reports this and exits
  }
  if (draining_) return check_drained();
  // Running children talk to us directly and finish; new ones need a new parent.
  restart_timer_.expires_after(std::chrono::seconds(1));
  restart_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || draining_) return;
    zygote_->stop();
    if (auto status = zygote_->start(); !status)
      std::fprintf(stderr, "kcoral-server: cannot restart the worker parent: %s\n",
                   status.error().message.c_str());
    else
      std::fprintf(stderr, "kcoral-server: worker parent restarted\n");
  });
}

void WorkerPool::top_up() {
  // Without a live zygote a fork request would be lost; the restarted one's "ready"
  // calls this again.
  if (draining_ || !ready_ || !zygote_->running()) return;
  std::vector<std::size_t> prepared(config_.groups.size(), 0);
  for (const auto& [pid, worker] : workers_)
    if (!worker->job && !worker->closed) ++prepared[worker->group];  // idle or starting
  for (std::size_t group : pending_forks_) ++prepared[group];
  // Prepared ahead: enough to run a group's programs and to keep its context making busy.
  std::size_t target = std::max(config_.workers_per_group, config_.context_inits_at_once);
  for (std::size_t group = 0; group < config_.groups.size(); ++group) {
    for (; prepared[group] < target; ++prepared[group]) {
      pending_forks_.push_back(group);
      zygote_->request_fork(config_.groups[group]);
    }
  }
}

void WorkerPool::dispatch() {
  // Prepared workers outnumber the running ones (the next is forked while a program runs);
  // at most workers_per_group of a group run at once.
  std::vector<std::size_t> running(config_.groups.size(), 0);
  for (const auto& [pid, worker] : workers_)
    if (worker->job) ++running[worker->group];
  while (!queue_.empty()) {
    auto free = std::find_if(idle_.begin(), idle_.end(), [&](const PoolWorkerPtr& worker) {
      return running[worker->group] < config_.workers_per_group;
    });
    if (free == idle_.end()) break;
    PoolWorkerPtr worker = *free;
    idle_.erase(free);
    Queued queued = std::move(queue_.front());
    queue_.pop_front();
    queued.timer->cancel();
    ++running[worker->group];
    start_job(worker, std::move(queued.job));
  }
  publish_load();
  top_up();
}

void WorkerPool::start_job(const PoolWorkerPtr& worker, std::shared_ptr<ExecuteJob> job) {
  worker->job = job;
  worker->ready = false;
  worker->dispatched = Clock::now();
  worker->progress.reset();
  worker->interfered_request_id.reset();
  ++running_;
  RunRequest request{job->request_id, job->program_json, job->output_limit_bytes, job->max_binary_bytes};
  if (auto sent = send_run(worker->channel, request, job->blobs); !sent) {
    // The child died before it could take the job: give the job back, drop the child.
    worker->job.reset();
    --running_;
    enqueue(std::move(job), /*front=*/true);
    worker->kill_tree();
    forget(worker);
    return;
  }
  worker->start_deadline(job->timeout_seconds, [this, worker, job] {
    if (worker->job != job) return;
    worker->kill_tree();
    finish(worker, fail(ErrorKind::timeout, "the program ran past its timeout of " +
                                                seconds_text(job->timeout_seconds) +
                                                "; its processes were killed"));
  });
}

void WorkerPool::read_worker(const PoolWorkerPtr& worker) {
  worker->readable.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                              [this, worker](boost::system::error_code ec) {
                                if (ec || worker->closed) return;
                                while (true) {
                                  auto message = worker->channel.receive();
                                  if (!message) return worker_closed(worker);
                                  if (!*message) break;
                                  handle_message(worker, std::move(**message));
                                  if (worker->closed) return;
                                }
                                read_worker(worker);
                              });
}

void WorkerPool::handle_message(const PoolWorkerPtr& worker, Message message) {
  Json json = Json::parse(message.json, nullptr, false);
  std::string type = json.is_object() ? json.value("type", "") : "";
  if (type == "ready") {
    worker->ready = true;
    idle_.push_back(worker);
    dispatch();
  } else if (type == "progress") {
    worker->progress = json.value("index", std::size_t{0});
  } else if (type == "lease") {
    handle_lease(worker, json.value("acquire", false));
  } else if (type == "init_lease") {
    handle_init_lease(worker, json.value("acquire", false));
  } else if (type == "gpu_access") {
    // A cpu_only call used the GPU: note whose program held it at that moment.
    if (auto holder = program_leases_.holder(worker->group)) {
      auto it = workers_.find(static_cast<pid_t>(*holder));
      if (it != workers_.end() && it->second->job) worker->interfered_request_id = it->second->job->request_id;
    }
  } else if (type == "failed") {
    std::fprintf(stderr, "kcoral-server: a worker could not start: %s\n", json.value("message", "").c_str());
  } else if (type == "parts") {
    for (UniqueFd& fd : message.fds) worker->parts.push_back(std::move(fd));
  } else if (type == "result" && worker->job) {
    worker->continues = json.value("continues", false);
    std::vector<UniqueFd> fds = std::move(worker->parts);
    for (UniqueFd& fd : message.fds) fds.push_back(std::move(fd));
    message.fds = std::move(fds);
    finish(worker, decode_result(std::move(message)));
  }
}

void WorkerPool::handle_lease(const PoolWorkerPtr& worker, bool acquire) {
  auto holder = static_cast<LeaseManager::HolderId>(worker->pid);
  if (!acquire) {
    program_leases_.release(worker->group, holder);
    return;
  }
  worker->pause_deadline();  // lease waiting is not the program's time
  // Granted now or, later, inside another worker's release: either way, continue on the
  // strand, and only if this worker is still the one asking.
  auto granted = [this, worker] { boost::asio::post(strand_, [this, worker] { grant(worker, true); }); };
  if (auto status = program_leases_.acquire(worker->group, holder, granted); !status) {
    std::fprintf(stderr, "kcoral-server: %s\n", status.error().message.c_str());
    worker->kill_tree();
  }
}

void WorkerPool::handle_init_lease(const PoolWorkerPtr& worker, bool acquire) {
  std::size_t group = worker->group;
  if (acquire) {
    worker->making_context = true;
    if (inits_running_[group] < config_.context_inits_at_once) {
      ++inits_running_[group];
      grant(worker, false);
    } else {
      inits_waiting_[group].push_back(worker);
    }
    return;
  }
  if (!worker->making_context) return;
  worker->making_context = false;
  --inits_running_[group];
  while (!inits_waiting_[group].empty() && inits_running_[group] < config_.context_inits_at_once) {
    PoolWorkerPtr next = inits_waiting_[group].front();
    inits_waiting_[group].pop_front();
    if (next->closed) continue;
    ++inits_running_[group];
    grant(next, false);
  }
}

void WorkerPool::grant(const PoolWorkerPtr& worker, bool resume_deadline) {
  if (worker->closed) return;
  if (resume_deadline) worker->resume_deadline();
  if (!worker->channel.send(R"({"type":"lease_granted"})")) worker->kill_tree();
}

void WorkerPool::worker_closed(const PoolWorkerPtr& worker) {
  if (!worker->job) return forget(worker);
  // Died mid-program. The zygote reports how (a signal, say) an instant later; wait
  // briefly for that, so the error can say it.
  worker->closed = true;
  boost::system::error_code ignored;
  worker->readable.close(ignored);
  worker->grace.expires_after(std::chrono::milliseconds(500));
  worker->grace.async_wait([this, worker](boost::system::error_code ec) {
    if (!ec && worker->job) crashed(worker, "");
  });
}

void WorkerPool::crashed(const PoolWorkerPtr& worker, const std::string& how) {
  worker->kill_tree();
  worker->continues = false;
  const std::shared_ptr<ExecuteJob>& job = worker->job;
  if (!worker->progress || *worker->progress >= job->program.instructions().size()) {
    finish(worker, fail(ErrorKind::engine, "the worker exited before it ran the program" +
                                               (how.empty() ? std::string() : " (" + how + ")")));
    return;
  }
  const Instruction& instruction = job->program.instructions()[*worker->progress];
  ProgramResult result;
  InstructionError error;
  error.kind = ErrorKind::runtime;
  error.message = "worker exited while executing the instruction";
  error.instruction_index = *worker->progress;
  error.instruction_op = op_name(instruction);
  if (auto id = instruction_id(instruction)) error.instruction_id = std::string(*id);
  if (!how.empty()) error.traceback = "The worker process ended: " + how + ".\n";
  result.error = std::move(error);
  finish(worker, std::move(result));
}

void WorkerPool::finish(const PoolWorkerPtr& worker, Result<ProgramResult> result) {
  std::shared_ptr<ExecuteJob> job = std::move(worker->job);
  if (!job) return;
  worker->cancel_timers();
  --running_;
  // Whatever the worker still holds comes back here, also when it was killed.
  LeaseTimes lease = program_leases_.finish(static_cast<LeaseManager::HolderId>(worker->pid));
  if (result && result->error && result->error->gpu_access)
    result->error->gpu_access->interfered_request_id = worker->interfered_request_id;
  ResponseTimings timings{ms_between(job->received, worker->dispatched),
                          ms_between(worker->dispatched, Clock::now()), lease.wait_ms, lease.held_ms};
  // A worker that goes on announces itself ready again; any other is done.
  if (!worker->continues) forget(worker);
  job->done({std::move(result), timings});
  if (draining_) check_drained();
  else dispatch();
}

void WorkerPool::forget(const PoolWorkerPtr& worker) {
  worker->closed = true;
  worker->cancel_timers();
  boost::system::error_code ignored;
  worker->readable.close(ignored);
  worker->channel = Channel();  // the child sees its channel close and exits
  program_leases_.finish(static_cast<LeaseManager::HolderId>(worker->pid));
  if (worker->making_context) handle_init_lease(worker, false);  // its turn goes to the next
  std::erase(inits_waiting_[worker->group], worker);
  std::erase(idle_, worker);
  workers_.erase(worker->pid);
  // Normally the zygote removes this when it reaps the child; not if it died first.
  remove_tree(config_.zygote.work_root + "/" + std::to_string(worker->pid));
  publish_load();
  top_up();
}

void WorkerPool::publish_load() {
  running_count_ = running_;
  waiting_count_ = queue_.size();
}

void WorkerPool::check_drained() {
  if (!draining_ || running_ > 0 || !drained_) return;
  for (auto& [pid, worker] : workers_) worker->kill_tree();
  if (zygote_) zygote_->stop();
  auto drained = std::move(drained_);
  drained_ = nullptr;
  drained();
}

}  // namespace kcoral
