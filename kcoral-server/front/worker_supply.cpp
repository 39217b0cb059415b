// WorkerSupply: forking ahead, the start trial and the back-off, the zygote's restarts, and
// the map of live workers.
#include "worker_supply.hpp"

#include <cstdio>
#include <filesystem>

#include "kcoral/remove_tree.hpp"

namespace kcoral {
namespace {

std::vector<bool> on_demand_of(const std::vector<WorkerGroup>& groups) {
  std::vector<bool> on_demand;
  for (const WorkerGroup& group : groups) on_demand.push_back(group.on_demand);
  return on_demand;
}

}  // namespace

WorkerSupply::WorkerSupply(Strand strand, Config config, LeaseBroker& leases, Events events)
    : strand_(strand), config_(std::move(config)), leases_(leases), events_(std::move(events)),
      restart_timer_(strand), fork_timer_(strand), starts_(on_demand_of(config_.groups), WorkerStarts::Settings{}),
      demand_(config_.groups.size(), 0) {}

WorkerSupply::~WorkerSupply() { stop(); }

Status WorkerSupply::start() {
  std::error_code ec;
  std::filesystem::create_directories(config_.zygote.worker.work_root, ec);
  zygote_ = std::make_unique<ZygoteHandle>(
      strand_, config_.zygote,
      ZygoteHandle::Callbacks{[this](std::map<std::string, std::string> versions) {
                                bool first = !zygote_started_;
                                zygote_started_ = zygote_ready_ = true;
                                if (first) versions_ = std::move(versions);
                                if (first && events_.parent_ready) events_.parent_ready();
                                top_up();
                              },
                              [this](Process process, UniqueFd channel) {
                                on_forked(std::move(process), std::move(channel));
                              },
                              [this](pid_t pid, std::string how, std::optional<std::string> failure) {
                                on_exited(pid, how, failure);
                              },
                              [this](std::string message) { on_zygote_failed(message); },
                              [this](std::string message) { on_fork_failed(message); }});
  return zygote_->start();
}

void WorkerSupply::top_up() {
  // Without a live zygote a fork request would be lost; the restarted one's ready calls
  // this again.
  if (stopping_ || !zygote_ready_ || !zygote_ || !zygote_->running()) return;
  std::vector<std::size_t> prepared(config_.groups.size(), 0);
  std::vector<std::size_t> starting(config_.groups.size(), 0);
  for (const auto& [pid, worker] : workers_) {
    auto state = worker->state();
    // An idle worker of an on-demand group is the owner's already: it took the program it
    // was forked for (and waits for its compile cache), or is being let go.
    bool idle = state == WorkerHandle::State::idle && !config_.groups[worker->group()].on_demand;
    if (state == WorkerHandle::State::starting) ++starting[worker->group()];
    if (state == WorkerHandle::State::starting || idle) ++prepared[worker->group()];
  }
  for (std::size_t group : pending_forks_) ++prepared[group], ++starting[group];
  // Prepared ahead: enough to run a group's programs and to keep its context making busy;
  // of an on-demand group, what the pool wants.
  std::size_t target = std::max(config_.workers_per_group, config_.context_inits_at_once);
  auto now = WorkerStarts::Clock::now();
  for (std::size_t group = 0; group < config_.groups.size(); ++group) {
    std::size_t wanted = config_.groups[group].on_demand ? demand_[group] : target;
    if (starts_.backing_off(group)) {
      // Its latest start failed: one worker at a time, once the back-off has passed.
      if (starting[group] > 0 || prepared[group] >= target) continue;
      if (auto at = starts_.next_fork_at(group); now < at) {
        wake_at(at);
        continue;
      }
      wanted = prepared[group] + 1;
    }
    for (; prepared[group] < wanted; ++prepared[group]) {
      pending_forks_.push_back(group);
      const WorkerGroup& of = config_.groups[group];
      zygote_->request_fork({of.visible_devices, of.cuda_connections, of.rerun_group.has_value(), !programs_waiting_});
    }
  }
}

void WorkerSupply::wake_at(WorkerStarts::Clock::time_point at) {
  if (fork_timer_at_ && *fork_timer_at_ <= at) return;  // an earlier wake-up comes first
  fork_timer_at_ = at;
  fork_timer_.expires_at(at);
  fork_timer_.async_wait([this, at](boost::system::error_code ec) {
    if (ec || fork_timer_at_ != at) return;  // cancelled, or re-armed for an earlier time
    fork_timer_at_.reset();
    top_up();
  });
}

void WorkerSupply::on_forked(Process process, UniqueFd channel) {
  std::size_t group = 0;
  if (!pending_forks_.empty()) {
    group = pending_forks_.front();  // the zygote answers fork requests in order
    pending_forks_.pop_front();
  }
  WorkerHandle::Events events{
      events_.idle, events_.finished, [this](const WorkerPtr& worker) { on_gone(worker); },
      [this](pid_t holder) -> std::shared_ptr<const ExecuteJob> {
        auto it = workers_.find(holder);
        return it == workers_.end() ? nullptr : it->second->job();
      },
      [this](const WorkerPtr& worker) { on_alive(worker); }, [this](const WorkerPtr& worker) { on_started(worker); },
      [this](const WorkerPtr& worker, const std::string& why, bool timed_out) {
        on_start_failed(worker->group(), worker->pid(), why, timed_out);
      }};
  pid_t pid = process.pid();
  WorkerHandle::Limits limits = config_.limits;
  if (config_.groups[group].on_demand) limits.programs = 1;  // see the file's comment
  auto worker = std::make_shared<WorkerHandle>(strand_, std::move(process), group, config_.groups[group].gpus,
                                               std::move(channel), leases_, std::move(events), limits,
                                               config_.long_steps);
  workers_[pid] = worker;
  worker->start();
}

void WorkerSupply::on_exited(pid_t pid, const std::string& how, const std::optional<std::string>& failure) {
  auto it = workers_.find(pid);
  if (it == workers_.end()) return;
  WorkerPtr worker = it->second;  // exited() may drop the map's reference
  worker->exited(how, failure);
}

void WorkerSupply::on_gone(const WorkerPtr& worker) {
  auto it = workers_.find(worker->pid());
  if (it == workers_.end() || it->second != worker) return;
  workers_.erase(it);
  // Normally the zygote removes this when it reaps the child; not if it died first.
  remove_tree(config_.zygote.worker.work_root + "/" + std::to_string(worker->pid()));
  events_.gone(worker);
  top_up();
}

void WorkerSupply::on_alive(const WorkerPtr& worker) {
  starts_.alive(worker->group());
  announce();
}

void WorkerSupply::on_started(const WorkerPtr& worker) {
  starts_.ready(worker->group());
  restarts_in_row_ = 0;
  if (events_.start_ended) events_.start_ended({worker->group(), worker->pid(), std::nullopt, false,
                                                 config_.groups[worker->group()].visible_devices});
  announce();
}

void WorkerSupply::on_start_failed(std::size_t group, pid_t pid, const std::string& why, bool timed_out) {
  starts_.failed(group, why, timed_out);
  if (events_.start_ended) events_.start_ended({group, pid, why, timed_out, config_.groups[group].visible_devices});
  announce();
}

// The start trial's outcome, once known, goes to the owner once.
void WorkerSupply::announce() {
  if (announced_ != Announced::not_yet) return;
  if (const auto& failure = starts_.trial_failure()) {
    announced_ = Announced::failed;
    return events_.failed("a worker failed to start: " + *failure);
  }
  if (!zygote_started_ || !starts_.trial_passed()) return;
  announced_ = Announced::ready;
  events_.ready(std::move(versions_));
}

// A fork the zygote could not make counts as a failed start of its group, which then backs
// off; the zygote and the workers it runs go on.
void WorkerSupply::on_fork_failed(const std::string& message) {
  if (pending_forks_.empty()) return;
  std::size_t group = pending_forks_.front();  // the zygote answers fork requests in order
  pending_forks_.pop_front();
  std::fprintf(stderr, "kcoral-server: the worker parent could not fork a worker: %s\n", message.c_str());
  on_start_failed(group, zygote_ ? zygote_->pid() : -1, "the worker parent could not fork it: " + message, false);
  top_up();  // after the group's back-off
}

void WorkerSupply::on_zygote_failed(const std::string& message) {
  std::fprintf(stderr, "kcoral-server: worker parent failed: %s\n", message.c_str());
  std::vector<std::size_t> lost = starts_in_progress();
  pending_forks_.clear();
  zygote_ready_ = false;  // no fork goes to it any more
  if (!zygote_started_) {  // it never started; the first reason is the one (its exit follows)
    if (announced_ != Announced::not_yet) return;
    announced_ = Announced::failed;
    return events_.failed(message);
  }
  if (stopping_) return;
  // Its workers still starting end with it, not for a fault of their own: they go
  // uncounted. Its failure counts as a failed start in every prepared group, and in an
  // on-demand group as one per start it cut short, each of which a program waited for.
  pid_t zygote = zygote_ ? zygote_->pid() : 0;
  for (std::size_t group = 0; group < config_.groups.size(); ++group) {
    std::size_t failed = config_.groups[group].on_demand ? lost[group] : 1;
    for (std::size_t i = 0; i < failed; ++i) on_start_failed(group, zygote, "the worker parent failed: " + message, false);
  }
  std::vector<WorkerPtr> starting;
  for (const auto& [pid, worker] : workers_)
    if (worker->state() == WorkerHandle::State::starting) starting.push_back(worker);
  for (const WorkerPtr& worker : starting) worker->discard();
  if (announced_ != Announced::ready || stopping_) return;  // the start failed with it: the server exits
  // Running children talk to us directly and finish; new ones need a new parent.
  restart_zygote();
}

// Per group, the forks asked for and the workers not yet ready.
std::vector<std::size_t> WorkerSupply::starts_in_progress() const {
  std::vector<std::size_t> starts(config_.groups.size(), 0);
  for (std::size_t group : pending_forks_) ++starts[group];
  for (const auto& [pid, worker] : workers_)
    if (worker->state() == WorkerHandle::State::starting) ++starts[worker->group()];
  return starts;
}

// Tries again until a new parent starts (it may lack descriptors or memory for a while):
// a second later, twice as long after each restart with no worker ready since, at most 32 s.
void WorkerSupply::restart_zygote() {
  restart_timer_.expires_after(std::chrono::seconds(1 << std::min<std::size_t>(restarts_in_row_, 5)));
  ++restarts_in_row_;
  restart_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopping_) return;
    zygote_->stop();
    if (auto status = zygote_->start(); !status) {
      std::fprintf(stderr, "kcoral-server: cannot restart the worker parent (trying again): %s\n",
                   status.error().message.c_str());
      return restart_zygote();
    }
    std::fprintf(stderr, "kcoral-server: worker parent restarted\n");
  });
}

void WorkerSupply::stop() {
  stopping_ = true;
  restart_timer_.cancel();
  fork_timer_.cancel();
  auto workers = std::move(workers_);
  workers_.clear();
  for (auto& [pid, worker] : workers) worker->discard();
  if (zygote_) zygote_->stop();
}

void WorkerSupply::abort_running(const Error& error, const ExecuteJob* only) {
  std::vector<WorkerPtr> running;  // abort() lets a worker go, which changes workers_
  for (const auto& [pid, worker] : workers_)
    if (worker->job() && (only == nullptr || worker->job().get() == only)) running.push_back(worker);
  for (const WorkerPtr& worker : running) worker->abort(error);
}

}  // namespace kcoral
