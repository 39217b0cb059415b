// WorkerSupply: keeps each group's prepared workers at strength.
//
// Owns the zygote handle and a WorkerHandle per live worker. Workers come in groups: one
// per GPU on a GPU server (each pinned to its GPU by UUID), one group on a CPU server.
// The supply forks ahead of time so that a program starts on a process that is already
// up: per group, enough workers that run no job to run the group's share of programs and
// to keep its context making busy. A zygote that dies is restarted; running workers talk
// to the front directly and finish. What the workers report goes on to the owner (the
// pool). Used on the pool's strand only, start() and stop() included.
//
//   WorkerSupply supply(strand, config, leases, events);
//   supply.start();   // events.ready once the zygote is up, then events.idle per worker
#pragma once

#include <sys/types.h>

#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lease_broker.hpp"
#include "worker_handle.hpp"
#include "zygote_handle.hpp"

namespace kcoral {

class WorkerSupply {
 public:
  using Strand = WorkerHandle::Strand;
  struct Config {
    // One group per entry: the CUDA_VISIBLE_DEVICES value (a GPU's UUID) of its workers;
    // a single empty entry on a CPU server.
    std::vector<std::string> groups{""};
    std::size_t workers_per_group = 1;
    std::size_t context_inits_at_once = 1;
    WorkerHandle::Limits limits;
    ZygoteConfig zygote;
  };
  struct Events {
    std::function<void(std::map<std::string, std::string> versions)> ready;  // the zygote is up
    std::function<void(const std::string& message)> failed;  // the zygote failed
    std::function<void(const WorkerPtr&)> idle;
    std::function<void(const WorkerPtr&, std::shared_ptr<ExecuteJob>, JobOutcome)> finished;
    std::function<void(const WorkerPtr&)> gone;
  };

  WorkerSupply(Strand strand, Config config, LeaseBroker& leases, Events events);
  WorkerSupply(const WorkerSupply&) = delete;
  WorkerSupply& operator=(const WorkerSupply&) = delete;
  ~WorkerSupply();

  [[nodiscard]] Status start();
  // Asks for the forks that bring every group back to strength.
  void top_up();
  // Stops forking: the zygote is restarted no more and top_up does nothing.
  void stop_forking() { stopping_ = true; }
  // Kills every worker and ends the zygote.
  void stop();
  // Kills the workers that run a program (only the one running `only`, when given); each
  // program is answered with `error`.
  void abort_running(const Error& error, const ExecuteJob* only = nullptr);

 private:
  void on_forked(pid_t pid, UniqueFd channel);
  void on_exited(pid_t pid, const std::string& how, const std::optional<std::string>& failure);
  void on_zygote_failed(const std::string& message);
  void restart_zygote();
  void on_gone(const WorkerPtr& worker);

  Strand strand_;
  Config config_;
  LeaseBroker& leases_;
  Events events_;
  std::unique_ptr<ZygoteHandle> zygote_;
  boost::asio::steady_timer restart_timer_;
  bool zygote_ready_ = false;
  bool stopping_ = false;
  std::map<pid_t, WorkerPtr> workers_;     // every live worker we know of
  std::deque<std::size_t> pending_forks_;  // the group of each fork asked for, in order
};

}  // namespace kcoral
