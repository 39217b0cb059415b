// WorkerStarts: how the starts of each group's workers go, and what the front makes of it.
//
// A worker has started when it says `ready` (on a GPU server that follows its CUDA
// context); it failed to start when it ends before that, says why it cannot (`failed`),
// breaks the protocol, or passes its start deadline (WorkerHandle). A failure of the
// worker parent once it was up counts for every group: no worker starts without it. From
// those outcomes, per group:
//   - the start trial: the server listens once the first worker of every group is alive
//     (its interpreter runs: `ready` on a CPU server; on a GPU server its request for a
//     context-making turn, which comes before its CUDA context, so that the start does not
//     wait on CUDA), and gives up with the failure when a group's first start fails;
//   - the back-off: after a failed start a group forks one worker at a time, 0.1 s after
//     the failure, twice as long after each further failure in a row, at most 10 s apart:
//     a worker that cannot start costs a fork and a sandbox every 10 s, not a core;
//   - failing: once every group has failed `failures_to_refuse` starts in a row, no
//     program can be run, so the pool answers queued and arriving ones at once (`engine`,
//     with the latest failure's reason) instead of at the queue timeout. The next `ready`
//     of a group ends it.
// Groups forked on demand (the set groups of several GPUs, WorkerGroups) stand apart: none
// of their workers is prepared ahead, so the trial and `failing` consider the prepared
// groups only, and they do not back off, since each of their forks is for a program that
// waits and that the start's failure answers (nothing forks again by itself). Their starts
// are counted as all others.
// Not thread-safe: used on the pool's strand (WorkerSupply); tests drive it directly.
//
//   WorkerStarts starts(groups.size());
//   starts.failed(0, "exit code 1", false);  // later: if (starts.failing()) refuse(starts.failing_message());
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kcoral {

class WorkerStarts {
 public:
  using Clock = std::chrono::steady_clock;
  struct Settings {
    // Three: one failure may be bad luck (a fork refused once), and the starts of a
    // server's first workers come at once; three in a row with no success between them
    // is a cause that stays.
    std::size_t failures_to_refuse = 3;
    Clock::duration first_backoff = std::chrono::milliseconds(100);
    Clock::duration max_backoff = std::chrono::seconds(10);
  };
  // For /metrics: starts by outcome, since the server started (timed_out apart from failed).
  struct Counts {
    std::uint64_t ready = 0;
    std::uint64_t failed = 0;
    std::uint64_t timed_out = 0;
    bool failing = false;
  };

  explicit WorkerStarts(std::size_t groups);
  WorkerStarts(std::size_t groups, Settings settings);
  // A group per entry, forked on demand where the entry is true.
  WorkerStarts(const std::vector<bool>& on_demand, Settings settings);

  // A worker of `group` shows that its interpreter runs (for the start trial only).
  void alive(std::size_t group);
  // A worker of `group` became ready: it started.
  void ready(std::size_t group);
  // A worker of `group` failed to start, for the reason `why` (a sentence a person can act
  // on); `timed_out` when it was killed at its start deadline.
  void failed(std::size_t group, const std::string& why, bool timed_out, Clock::time_point now = Clock::now());

  // Whether the first worker of every prepared group is alive.
  [[nodiscard]] bool trial_passed() const;
  // Why the trial failed: the failure of a prepared group's first start (nullopt while
  // none failed first).
  [[nodiscard]] const std::optional<std::string>& trial_failure() const { return trial_failure_; }

  // Whether every prepared group has failed its last starts, `failures_to_refuse` in a row.
  [[nodiscard]] bool failing() const;
  // What programs are answered while failing(): the count and the latest reason.
  [[nodiscard]] std::string failing_message() const;

  // Whether `group` is backing off: its latest start failed (never one forked on demand).
  [[nodiscard]] bool backing_off(std::size_t group) const {
    return !groups_.at(group).on_demand && groups_.at(group).failures_in_row > 0;
  }
  // When `group` may fork its next worker (now, or in the past, unless backing off).
  [[nodiscard]] Clock::time_point next_fork_at(std::size_t group) const;
  [[nodiscard]] std::size_t failures_in_row(std::size_t group) const { return groups_.at(group).failures_in_row; }

  [[nodiscard]] Counts counts() const;

 private:
  enum class First { none, alive, failed };
  struct Group {
    bool on_demand = false;
    First first = First::none;
    std::size_t failures_in_row = 0;
    Clock::time_point last_failure{};
  };

  Settings settings_;
  std::vector<Group> groups_;
  std::optional<std::string> trial_failure_;
  std::string latest_failure_;
  Counts counts_;
};

}  // namespace kcoral
