// WorkerGroups: the per-GPU groups, the set groups' aligned blocks, and the choice of a
// block for a program.
#include "worker_groups.hpp"

namespace kcoral {

std::vector<std::vector<std::size_t>> gpu_blocks(std::size_t gpus, std::size_t max_per_program) {
  std::vector<std::vector<std::size_t>> blocks;
  for (std::size_t size = 2; size <= max_per_program && size <= gpus; ++size) {
    for (std::size_t first = 0; first + size <= gpus; first += size) {
      std::vector<std::size_t> block(size);
      for (std::size_t i = 0; i < size; ++i) block[i] = first + i;
      blocks.push_back(std::move(block));
    }
  }
  return blocks;
}

std::vector<WorkerGroup> worker_groups(const std::vector<std::string>& per_gpu, std::size_t max_per_program,
                                       std::optional<int> cuda_connections) {
  bool one_queue = !cuda_connections;
  std::vector<WorkerGroup> groups;
  for (std::size_t gpu = 0; gpu < per_gpu.size(); ++gpu)
    groups.push_back({per_gpu[gpu], {gpu}, false, one_queue ? 1 : *cuda_connections});
  for (std::vector<std::size_t>& block : gpu_blocks(per_gpu.size(), max_per_program)) {
    std::string visible;
    for (std::size_t gpu : block) visible += (visible.empty() ? "" : ",") + per_gpu[gpu];
    groups.push_back({std::move(visible), std::move(block), true, cuda_connections.value_or(0)});
  }
  if (one_queue)
    for (std::size_t gpu = 0; gpu < per_gpu.size(); ++gpu) {
      groups[gpu].rerun_group = groups.size();
      groups.push_back({per_gpu[gpu], {gpu}, true, 0});
    }
  return groups;
}

std::optional<std::size_t> least_loaded_block(const std::vector<WorkerGroup>& groups, std::size_t size,
                                              const std::vector<std::size_t>& programs_on_gpu) {
  // The programs on the block's GPUs, summed: roughly what stands between the program and
  // its leases, which come once every GPU of the block is free. A rough measure (programs
  // differ in length), but a cheap one that spreads programs of one size over the blocks.
  std::optional<std::size_t> chosen;
  std::size_t chosen_load = 0;
  if (size < 2) return std::nullopt;  // the rerun groups are of one GPU, and are not chosen here
  for (std::size_t group = 0; group < groups.size(); ++group) {
    if (!groups[group].on_demand || groups[group].gpus.size() != size) continue;
    std::size_t load = 0;
    for (std::size_t gpu : groups[group].gpus) load += gpu < programs_on_gpu.size() ? programs_on_gpu[gpu] : 0;
    if (!chosen || load < chosen_load) chosen = group, chosen_load = load;
  }
  return chosen;
}

}  // namespace kcoral
