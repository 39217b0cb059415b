// WorkerSupply: keeps each group's prepared workers at strength.
//
// Owns the zygote handle and a WorkerHandle per live worker. Workers come in groups
// (WorkerGroups): one per GPU on a GPU server (each pinned to its GPU by UUID), one group
// on a CPU server, and on a server that gives a program several GPUs, the set groups. The
// supply forks ahead of time so that a program starts on a process that is already up:
// per prepared group, enough workers that run no job to run the group's share of programs
// and to keep its context making busy. A set group (on demand) has none prepared: the
// pool says how many of its workers it wants (want(), one per program that waits for
// one), and the supply keeps that many starting (an idle one is the pool's at once). A
// set group's worker runs one program and is let go, whatever --programs-per-worker says:
// it holds CUDA contexts on several GPUs, which programs of one GPU need free. A zygote
// that dies is restarted, a second later, then twice as long after each restart with no
// worker ready since (at most 32 s); running workers talk to the front directly and
// finish. How each start goes is kept in a WorkerStarts: the supply is ready once the
// first worker of every prepared group is alive (the start trial) and has failed when one
// of them fails first; after a failed start a prepared group forks one worker at a time,
// backing off. What the workers report goes on to the owner (the pool). Used on the
// pool's strand only, start() and stop() included.
//
//   WorkerSupply supply(strand, config, leases, events);
//   supply.start();   // events.ready once the first workers are alive, then events.idle per worker
#pragma once

#include <sys/types.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lease_broker.hpp"
#include "worker_groups.hpp"
#include "worker_handle.hpp"
#include "worker_starts.hpp"
#include "zygote_handle.hpp"

namespace kcoral {

class WorkerSupply {
 public:
  using Strand = WorkerHandle::Strand;
  struct Config {
    // The groups (WorkerGroups): a single one, for GPU 0 with no device named, on a CPU
    // server.
    std::vector<WorkerGroup> groups{WorkerGroup{}};
    std::size_t workers_per_group = 1;
    std::size_t context_inits_at_once = 1;
    WorkerHandle::Limits limits;
    ZygoteConfig zygote;
    boost::asio::thread_pool* long_steps = nullptr;  // the workers' (WorkerHandle)
  };
  // A start that ended, ready or not.
  struct StartEnd {
    std::size_t group = 0;
    pid_t pid = 0;                       // the worker's, or the zygote's when it failed
    std::optional<std::string> failure;  // why it did not start; nullopt: it did
    bool timed_out = false;              // killed at its start deadline
    std::string visible_devices = {};    // its group's (WorkerGroup::visible_devices)
  };
  struct Events {
    // The zygote is up and the first worker of every group is alive (the start trial).
    std::function<void(std::map<std::string, std::string> versions)> ready;
    // The zygote failed, or the first start of a group did, before `ready`.
    std::function<void(const std::string& message)> failed;
    std::function<void(const WorkerPtr&)> idle;
    std::function<void(const WorkerPtr&, std::shared_ptr<ExecuteJob>, JobOutcome)> finished;
    std::function<void(const WorkerPtr&)> gone;
    // After starts() has taken it in; may be left empty.
    std::function<void(const StartEnd&)> start_ended;
    // The zygote is up for the first time (before `ready`); may be left empty.
    std::function<void()> parent_ready;
  };

  WorkerSupply(Strand strand, Config config, LeaseBroker& leases, Events events);
  WorkerSupply(const WorkerSupply&) = delete;
  WorkerSupply& operator=(const WorkerSupply&) = delete;
  ~WorkerSupply();

  [[nodiscard]] Status start();
  // Asks for the forks that bring every group back to strength.
  void top_up();
  // Wants `workers` workers of the on-demand `group` starting: top_up forks what lacks.
  // Fewer than there are lets the rest finish their starts (the pool lets go those it has
  // no program for).
  void want(std::size_t group, std::size_t workers) { demand_.at(group) = workers; }
  // Whether programs wait for a worker now: the workers forked meanwhile skip the warm-up
  // (messages::Fork::warm_up), which would only delay them.
  void programs_waiting(bool waiting) { programs_waiting_ = waiting; }
  // Stops forking: the zygote is restarted no more and top_up does nothing.
  void stop_forking() { stopping_ = true; }
  // Kills every worker and ends the zygote.
  void stop();
  // Kills the workers that run a program (only the one running `only`, when given); each
  // program is answered with `error`.
  void abort_running(const Error& error, const ExecuteJob* only = nullptr);
  // How the workers' starts went.
  [[nodiscard]] const WorkerStarts& starts() const { return starts_; }

 private:
  void on_forked(Process process, UniqueFd channel);
  void on_exited(pid_t pid, const std::string& how, const std::optional<std::string>& failure);
  void on_zygote_failed(const std::string& message);
  void on_fork_failed(const std::string& message);
  void restart_zygote();
  void on_gone(const WorkerPtr& worker);
  void on_alive(const WorkerPtr& worker);
  void on_started(const WorkerPtr& worker);
  void on_start_failed(std::size_t group, pid_t pid, const std::string& why, bool timed_out);
  [[nodiscard]] std::vector<std::size_t> starts_in_progress() const;
  void announce();
  void wake_at(WorkerStarts::Clock::time_point at);

  Strand strand_;
  Config config_;
  LeaseBroker& leases_;
  Events events_;
  std::unique_ptr<ZygoteHandle> zygote_;
  boost::asio::steady_timer restart_timer_;
  boost::asio::steady_timer fork_timer_;  // the end of a back-off: top_up again
  std::optional<WorkerStarts::Clock::time_point> fork_timer_at_;
  WorkerStarts starts_;
  std::map<std::string, std::string> versions_;  // the zygote's, until the trial passes
  bool programs_waiting_ = false;
  bool zygote_started_ = false;  // a zygote was ready once
  bool zygote_ready_ = false;    // the zygote now running is (none forks before)
  enum class Announced { not_yet, ready, failed } announced_ = Announced::not_yet;
  std::size_t restarts_in_row_ = 0;  // zygote restarts with no worker ready since
  bool stopping_ = false;
  std::map<pid_t, WorkerPtr> workers_;     // every live worker we know of
  std::deque<std::size_t> pending_forks_;  // the group of each fork asked for, in order
  std::vector<std::size_t> demand_;        // per group: workers wanted, for on-demand ones
};

}  // namespace kcoral
