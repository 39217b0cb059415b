// WorkerSupply: forking ahead, the zygote's restarts, and the map of live workers.
#include "worker_supply.hpp"

#include <cstdio>
#include <filesystem>

#include "kcoral/remove_tree.hpp"

namespace kcoral {

WorkerSupply::WorkerSupply(Strand strand, Config config, LeaseBroker& leases, Events events)
    : strand_(strand), config_(std::move(config)), leases_(leases), events_(std::move(events)),
      restart_timer_(strand) {}

WorkerSupply::~WorkerSupply() { stop(); }

Status WorkerSupply::start() {
  std::error_code ec;
  std::filesystem::create_directories(config_.zygote.work_root, ec);
  zygote_ = std::make_unique<ZygoteHandle>(
      strand_, config_.zygote,
      ZygoteHandle::Callbacks{[this](std::map<std::string, std::string> versions) {
                                bool first = !zygote_ready_;
                                zygote_ready_ = true;
                                if (first) events_.ready(std::move(versions));
                                top_up();
                              },
                              [this](pid_t pid, UniqueFd channel) { on_forked(pid, std::move(channel)); },
                              [this](pid_t pid, std::string how, std::optional<std::string> failure) {
                                on_exited(pid, how, failure);
                              },
                              [this](std::string message) { on_zygote_failed(message); }});
  return zygote_->start();
}

void WorkerSupply::top_up() {
  // Without a live zygote a fork request would be lost; the restarted one's ready calls
  // this again.
  if (stopping_ || !zygote_ready_ || !zygote_ || !zygote_->running()) return;
  std::vector<std::size_t> prepared(config_.groups.size(), 0);
  for (const auto& [pid, worker] : workers_) {
    auto state = worker->state();
    if (state == WorkerHandle::State::starting || state == WorkerHandle::State::idle) ++prepared[worker->group()];
  }
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

void WorkerSupply::on_forked(pid_t pid, UniqueFd channel) {
  std::size_t group = 0;
  if (!pending_forks_.empty()) {
    group = pending_forks_.front();  // the zygote answers fork requests in order
    pending_forks_.pop_front();
  }
  WorkerHandle::Events events{
      events_.idle, events_.finished, [this](const WorkerPtr& worker) { on_gone(worker); },
      [this](pid_t holder) -> std::optional<std::string> {
        auto it = workers_.find(holder);
        if (it == workers_.end() || !it->second->job()) return std::nullopt;
        return it->second->job()->request_id;
      }};
  auto worker = std::make_shared<WorkerHandle>(strand_, pid, group, std::move(channel), leases_, std::move(events),
                                               config_.limits);
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
  remove_tree(config_.zygote.work_root + "/" + std::to_string(worker->pid()));
  events_.gone(worker);
  top_up();
}

void WorkerSupply::on_zygote_failed(const std::string& message) {
  std::fprintf(stderr, "kcoral-server: worker parent failed: %s\n", message.c_str());
  pending_forks_.clear();
  if (!zygote_ready_) return events_.failed(message);  // it never started
  if (stopping_) return;
  // Running children talk to us directly and finish; new ones need a new parent.
  restart_zygote();
}

// Tries every second until a new parent starts (it may lack descriptors or memory for a
// while).
void WorkerSupply::restart_zygote() {
  restart_timer_.expires_after(std::chrono::seconds(1));
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
