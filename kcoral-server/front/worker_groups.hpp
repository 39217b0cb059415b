// WorkerGroups: which GPUs the workers of each group see and lease.
//
// A GPU server has a group of prepared workers per GPU, each worker pinned to its GPU.
// A program that asks for n > 1 GPUs (options.gpu_count) runs in a worker of a set group:
// one that sees n GPUs and holds all n leases at once. The set groups are the aligned
// blocks of n consecutive GPUs of the server's list, for each n from 2 to the most one
// program may hold: with 4 GPUs, {0,1} and {2,3} for two, {0,1,2} for three, {0,1,2,3} for
// four. Aligned blocks keep the choice small and make blocks of one size disjoint, so two
// programs of the same size never wait on each other while another block is free. Set
// groups have no prepared workers: a worker of one is forked for a program that waits for
// it (its start takes a fork and n CUDA contexts, and most programs want one GPU).
// A group's GPUs are indices into the server's GPU list (the lease indices); on a CPU
// server, its one group names index 0, which no worker leases.
// With --cuda-connections auto, the per-GPU groups' workers make CUDA contexts of one
// hardware queue (twice as fast to make and tear down), and each GPU has a rerun group
// too: on demand, of CUDA's default queues, where a program runs again when its
// benchmark() found a call's work on several streams, which one queue would have run one
// after the other (kcoral/benchmark.hpp). Set groups always have CUDA's default queues.
//
//   auto groups = worker_groups({"GPU-a", "GPU-b"}, 2);  // two per-GPU groups, then {0,1}
//   std::size_t group = least_loaded_block(groups, 2, programs_on_each_gpu);
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kcoral {

struct WorkerGroup {
  // The CUDA_VISIBLE_DEVICES value of its workers: a GPU's UUID, or a set's UUIDs joined
  // by commas in order; empty on a CPU server.
  std::string visible_devices;
  std::vector<std::size_t> gpus = {0};  // its GPUs' positions in the server's list, ascending
  bool on_demand = false;               // a set or rerun group: no worker prepared ahead
  // CUDA_DEVICE_MAX_CONNECTIONS of its workers: their contexts' hardware queues (0: CUDA's
  // default of 8).
  int cuda_connections = 0;
  // A one-queue group's rerun group (see above); nullopt for every other group.
  std::optional<std::size_t> rerun_group = std::nullopt;
};

// The aligned blocks of n consecutive GPUs of `gpus`, for each n from 2 to
// `max_per_program`, as many whole blocks of each size as fit; by size, then position.
[[nodiscard]] std::vector<std::vector<std::size_t>> gpu_blocks(std::size_t gpus, std::size_t max_per_program);

// The groups of a pool: one per entry of `per_gpu` (the prepared groups, group i on GPU i),
// then one per block of gpu_blocks(per_gpu.size(), max_per_program), then, with
// `cuda_connections` nullopt (auto), the rerun group of each GPU. Otherwise every worker's
// contexts have `cuda_connections` queues (0: CUDA's default).
[[nodiscard]] std::vector<WorkerGroup> worker_groups(const std::vector<std::string>& per_gpu,
                                                     std::size_t max_per_program,
                                                     std::optional<int> cuda_connections = 0);

// The set group of `size` (2 or more) GPUs a program goes to: the one whose GPUs have the
// fewest programs running or waiting on them now (`programs_on_gpu`, by GPU), summed over
// its GPUs; ties go to the lowest index. Nullopt when no set group has that size.
[[nodiscard]] std::optional<std::size_t> least_loaded_block(const std::vector<WorkerGroup>& groups, std::size_t size,
                                                            const std::vector<std::size_t>& programs_on_gpu);

}  // namespace kcoral
