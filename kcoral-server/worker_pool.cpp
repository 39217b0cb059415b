// WorkerPool: queue, prepared children, deadlines and crash attribution.
#include "worker_pool.hpp"

#include <fcntl.h>
#include <signal.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "worker_protocol.hpp"

namespace kcoral {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct WorkerPool::Worker {
  Worker(boost::asio::io_context& io, pid_t pid, UniqueFd socket)
      : pid(pid), channel(std::move(socket)), readable(io), deadline(io), grace(io) {}

  pid_t pid;
  Channel channel;
  boost::asio::posix::stream_descriptor readable;
  bool ready = false;
  std::shared_ptr<ExecuteJob> job;
  Clock::time_point dispatched;
  std::optional<std::size_t> progress;  // the instruction now running
  std::vector<UniqueFd> parts;          // result parts sent ahead of the result
  boost::asio::steady_timer deadline;
  boost::asio::steady_timer grace;  // after a crash: time for the zygote to say how it died
  bool closed = false;

  void kill_tree() const {
    ::kill(-pid, SIGKILL);  // the worker leads its own process group
    ::kill(pid, SIGKILL);
  }
};

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
    : io_(io), strand_(boost::asio::make_strand(io)), config_(std::move(config)), restart_timer_(io) {}

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
              std::lock_guard lock(versions_mutex_);
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

void WorkerPool::submit(std::shared_ptr<ExecuteJob> job) {
  boost::asio::post(strand_, [this, job = std::move(job)]() mutable {
    if (draining_) {
      job->done({fail(ErrorKind::busy, "the server is shutting down"), {}});
      return;
    }
    auto timer = std::make_unique<boost::asio::steady_timer>(io_);
    timer->expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(config_.queue_timeout_seconds)));
    auto position = queue_.insert(queue_.end(), Queued{job, std::move(timer)});
    position->timer->async_wait(boost::asio::bind_executor(
        strand_, [this, job](boost::system::error_code ec) {
          if (ec) return;
          auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Queued& q) { return q.job == job; });
          if (it == queue_.end()) return;
          queue_.erase(it);
          publish_load();
          ResponseTimings timings{ms_between(job->received, Clock::now()), 0, 0, 0};
          job->done({fail(ErrorKind::busy, "no worker became free within the queue timeout of " +
                                               seconds_text(config_.queue_timeout_seconds)),
                     timings});
        }));
    publish_load();
    dispatch();
  });
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
  return {config_.capacity, running_count_.load(), waiting_count_.load()};
}

std::map<std::string, std::string> WorkerPool::versions() const {
  std::lock_guard lock(versions_mutex_);
  return versions_;
}

void WorkerPool::on_forked(pid_t pid, UniqueFd channel) {
  if (pending_forks_ > 0) --pending_forks_;
  ::fcntl(channel.get(), F_SETFL, O_NONBLOCK);
  auto worker = std::make_shared<Worker>(io_, pid, std::move(channel));
  worker->readable.assign(::fcntl(worker->channel.fd(), F_DUPFD_CLOEXEC, 3));
  workers_[pid] = worker;
  read_worker(worker);
}

void WorkerPool::on_exited(pid_t pid, const std::string& how) {
  auto it = workers_.find(pid);
  if (it == workers_.end()) return;
  WorkerPtr worker = it->second;
  if (worker->job) crashed(worker, how);
  else forget(worker);
}

void WorkerPool::on_zygote_failed(const std::string& message) {
  std::fprintf(stderr, "kcoral-server: worker parent failed: %s\n", message.c_str());
  pending_forks_ = 0;
  if (draining_) return check_drained();
  // Running children talk to us directly and finish; new ones need a new parent.
  restart_timer_.expires_after(std::chrono::seconds(1));
  restart_timer_.async_wait(boost::asio::bind_executor(strand_, [this](boost::system::error_code ec) {
    if (ec || draining_) return;
    zygote_->stop();
    if (auto status = zygote_->start(); !status)
      std::fprintf(stderr, "kcoral-server: cannot restart the worker parent: %s\n",
                   status.error().message.c_str());
  }));
}

void WorkerPool::top_up() {
  if (draining_ || !ready_) return;
  std::size_t starting = 0;
  for (const auto& [pid, worker] : workers_) starting += !worker->ready && !worker->job ? 1 : 0;
  while (idle_.size() + starting + pending_forks_ < config_.capacity) {
    ++pending_forks_;
    zygote_->request_fork();
  }
}

void WorkerPool::dispatch() {
  while (!queue_.empty() && !idle_.empty() && running_ < config_.capacity) {
    Queued queued = std::move(queue_.front());
    queue_.pop_front();
    queued.timer->cancel();
    WorkerPtr worker = idle_.front();
    idle_.pop_front();
    start_job(worker, std::move(queued.job));
  }
  publish_load();
  top_up();
}

void WorkerPool::start_job(const WorkerPtr& worker, std::shared_ptr<ExecuteJob> job) {
  worker->job = job;
  worker->dispatched = Clock::now();
  ++running_;
  RunRequest request{job->request_id, job->program_json, job->output_limit_bytes, job->max_binary_bytes};
  if (auto sent = send_run(worker->channel, request, job->blobs); !sent) {
    // The child died before it could take the job: give the job back, drop the child.
    worker->job.reset();
    --running_;
    queue_.push_front(Queued{std::move(job), std::make_unique<boost::asio::steady_timer>(io_)});
    worker->kill_tree();
    forget(worker);
    return;
  }
  worker->deadline.expires_after(std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(job->timeout_seconds)));
  worker->deadline.async_wait(boost::asio::bind_executor(
      strand_, [this, worker, job](boost::system::error_code ec) {
        if (ec || worker->job != job) return;
        worker->kill_tree();
        finish(worker, fail(ErrorKind::timeout, "the program ran past its timeout of " +
                                                    seconds_text(job->timeout_seconds) +
                                                    "; its processes were killed"));
      }));
}

void WorkerPool::read_worker(const WorkerPtr& worker) {
  worker->readable.async_wait(
      boost::asio::posix::stream_descriptor::wait_read,
      boost::asio::bind_executor(strand_, [this, worker](boost::system::error_code ec) {
        if (ec || worker->closed) return;
        while (true) {
          auto message = worker->channel.receive();
          if (!message) return worker_closed(worker);
          if (!*message) break;
          handle_message(worker, std::move(**message));
          if (worker->closed) return;
        }
        read_worker(worker);
      }));
}

void WorkerPool::handle_message(const WorkerPtr& worker, Message message) {
  std::string type = message_type(message.json);
  if (type == "ready") {
    worker->ready = true;
    idle_.push_back(worker);
    dispatch();
  } else if (type == "progress") {
    Json json = Json::parse(message.json, nullptr, false);
    if (json.is_object()) worker->progress = json.value("index", std::size_t{0});
  } else if (type == "parts") {
    for (UniqueFd& fd : message.fds) worker->parts.push_back(std::move(fd));
  } else if (type == "result" && worker->job) {
    std::vector<UniqueFd> fds = std::move(worker->parts);
    for (UniqueFd& fd : message.fds) fds.push_back(std::move(fd));
    message.fds = std::move(fds);
    finish(worker, decode_result(std::move(message)));
  }
}

void WorkerPool::worker_closed(const WorkerPtr& worker) {
  if (!worker->job) return forget(worker);
  // Died mid-program. The zygote reports how (a signal, say) an instant later; wait
  // briefly for that, so the error can say it.
  worker->closed = true;
  boost::system::error_code ignored;
  worker->readable.close(ignored);
  worker->grace.expires_after(std::chrono::milliseconds(500));
  worker->grace.async_wait(boost::asio::bind_executor(strand_, [this, worker](boost::system::error_code ec) {
    if (!ec && worker->job) crashed(worker, "");
  }));
}

void WorkerPool::crashed(const WorkerPtr& worker, const std::string& how) {
  worker->kill_tree();
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

void WorkerPool::finish(const WorkerPtr& worker, Result<ProgramResult> result) {
  std::shared_ptr<ExecuteJob> job = std::move(worker->job);
  if (!job) return;
  worker->deadline.cancel();
  worker->grace.cancel();
  --running_;
  Clock::time_point now = Clock::now();
  ResponseTimings timings{ms_between(job->received, worker->dispatched),
                          ms_between(worker->dispatched, now), 0, 0};
  forget(worker);
  job->done({std::move(result), timings});
  if (draining_) check_drained();
  else dispatch();
}

void WorkerPool::forget(const WorkerPtr& worker) {
  worker->closed = true;
  boost::system::error_code ignored;
  worker->readable.close(ignored);
  worker->channel = Channel();  // the child sees its channel close and exits
  std::erase(idle_, worker);
  workers_.erase(worker->pid);
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
