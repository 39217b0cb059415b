// WorkerStarts: the per-group record of worker starts, and the trial, back-off and failing
// state read from it.
#include "worker_starts.hpp"

#include <algorithm>

namespace kcoral {

WorkerStarts::WorkerStarts(std::size_t groups) : WorkerStarts(groups, Settings{}) {}

WorkerStarts::WorkerStarts(std::size_t groups, Settings settings)
    : settings_(settings), groups_(std::max<std::size_t>(groups, 1)) {
  settings_.failures_to_refuse = std::max<std::size_t>(settings_.failures_to_refuse, 1);
}

WorkerStarts::WorkerStarts(const std::vector<bool>& on_demand, Settings settings)
    : WorkerStarts(on_demand.size(), settings) {
  for (std::size_t group = 0; group < on_demand.size(); ++group) groups_[group].on_demand = on_demand[group];
}

void WorkerStarts::alive(std::size_t group) {
  Group& g = groups_.at(group);
  if (g.first == First::none) g.first = First::alive;
}

void WorkerStarts::ready(std::size_t group) {
  alive(group);
  groups_.at(group).failures_in_row = 0;
  ++counts_.ready;
}

void WorkerStarts::failed(std::size_t group, const std::string& why, bool timed_out, Clock::time_point now) {
  Group& g = groups_.at(group);
  if (g.first == First::none && !g.on_demand) {
    g.first = First::failed;
    if (!trial_failure_) trial_failure_ = why;
  }
  ++g.failures_in_row;
  g.last_failure = now;
  if (!g.on_demand) latest_failure_ = why;  // what `failing` says is the prepared groups' failure
  ++(timed_out ? counts_.timed_out : counts_.failed);
}

bool WorkerStarts::trial_passed() const {
  return std::all_of(groups_.begin(), groups_.end(),
                     [](const Group& g) { return g.on_demand || g.first == First::alive; });
}

bool WorkerStarts::failing() const {
  return std::all_of(groups_.begin(), groups_.end(), [&](const Group& g) {
    return g.on_demand || g.failures_in_row >= settings_.failures_to_refuse;
  });
}

std::string WorkerStarts::failing_message() const {
  std::optional<std::size_t> in_row;
  for (const Group& g : groups_)
    if (!g.on_demand) in_row = std::min(in_row.value_or(g.failures_in_row), g.failures_in_row);
  return "no worker can start on this server: its last " + std::to_string(in_row.value_or(0)) +
         " worker starts failed, the latest with: " + latest_failure_;
}

WorkerStarts::Clock::time_point WorkerStarts::next_fork_at(std::size_t group) const {
  const Group& g = groups_.at(group);
  if (g.failures_in_row == 0) return {};
  Clock::duration delay = settings_.first_backoff;
  for (std::size_t i = 1; i < g.failures_in_row && delay < settings_.max_backoff; ++i) delay *= 2;
  return g.last_failure + std::min(delay, settings_.max_backoff);
}

WorkerStarts::Counts WorkerStarts::counts() const {
  Counts counts = counts_;
  counts.failing = failing();
  return counts;
}

}  // namespace kcoral
