// LeaseBroker: program leases through LeaseManager, context-making turns as a counted queue.
#include "lease_broker.hpp"

#include <algorithm>

namespace kcoral {

LeaseBroker::LeaseBroker(std::size_t gpus, std::size_t context_inits_at_once)
    : program_leases_(gpus), context_inits_at_once_(std::max<std::size_t>(1, context_inits_at_once)),
      init_turns_(gpus) {}

Status LeaseBroker::acquire_program(const std::vector<std::size_t>& gpus, pid_t worker, Granted granted) {
  return program_leases_.acquire(gpus, static_cast<LeaseManager::HolderId>(worker), std::move(granted));
}

void LeaseBroker::release_program(pid_t worker) {
  program_leases_.release(static_cast<LeaseManager::HolderId>(worker));
}

std::optional<pid_t> LeaseBroker::program_holder(const std::vector<std::size_t>& gpus, pid_t worker) const {
  for (std::size_t gpu : gpus) {
    auto holder = program_leases_.holder(gpu);
    if (holder && static_cast<pid_t>(*holder) != worker) return static_cast<pid_t>(*holder);
  }
  return std::nullopt;
}

void LeaseBroker::acquire_init(const std::vector<std::size_t>& gpus, pid_t worker, Granted granted) {
  if (gpus.size() != 1) return granted();
  init_turns_[gpus.front()].waiting.push_back({worker, std::move(granted)});
  hand_out_init_turns(gpus.front());
}

void LeaseBroker::release_init(const std::vector<std::size_t>& gpus, pid_t worker) {
  if (gpus.size() != 1) return;  // granted without a turn
  InitTurns& turns = init_turns_[gpus.front()];
  std::erase(turns.holders, worker);
  std::erase_if(turns.waiting, [&](const InitWaiter& waiter) { return waiter.worker == worker; });
  hand_out_init_turns(gpus.front());
}

LeaseTimes LeaseBroker::finish(const std::vector<std::size_t>& gpus, pid_t worker) {
  release_init(gpus, worker);
  return program_leases_.finish(static_cast<LeaseManager::HolderId>(worker));
}

void LeaseBroker::hand_out_init_turns(std::size_t gpu) {
  InitTurns& turns = init_turns_[gpu];
  while (!turns.waiting.empty() && turns.holders.size() < context_inits_at_once_) {
    InitWaiter next = std::move(turns.waiting.front());
    turns.waiting.pop_front();
    turns.holders.push_back(next.worker);
    next.granted();
  }
}

}  // namespace kcoral
