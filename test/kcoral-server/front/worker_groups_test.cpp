// WorkerGroups (kcoral-server/front/worker_groups.cpp): the aligned blocks of n
// consecutive GPUs for each n from 2 to the most a program holds, as many whole blocks as
// fit; the groups of a pool (one per GPU, prepared, then one per block, on demand, seeing
// its GPUs' UUIDs joined by commas); the block a program goes to, the one whose GPUs have
// the fewest programs now, ties to the lowest.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "worker_groups.hpp"

using Blocks = std::vector<std::vector<std::size_t>>;

TEST_SUITE("worker_groups") {

TEST_CASE("blocks: aligned, consecutive, whole, for each size from 2 to the most per program") {
  CHECK(kcoral::gpu_blocks(4, 4) == Blocks{{0, 1}, {2, 3}, {0, 1, 2}, {0, 1, 2, 3}});
  CHECK(kcoral::gpu_blocks(5, 2) == Blocks{{0, 1}, {2, 3}});  // GPU 4 fits no whole pair
  CHECK(kcoral::gpu_blocks(3, 3) == Blocks{{0, 1}, {0, 1, 2}});
  CHECK(kcoral::gpu_blocks(8, 8).size() == 4 + 2 + 2 + 1 + 1 + 1 + 1);
  CHECK(kcoral::gpu_blocks(8, 8)[8] == std::vector<std::size_t>{0, 1, 2, 3, 4});
  CHECK(kcoral::gpu_blocks(4, 1).empty());  // one GPU per program: no set
  CHECK(kcoral::gpu_blocks(1, 8).empty());  // no more than the server has
  CHECK(kcoral::gpu_blocks(0, 0).empty());
}

TEST_CASE("groups: one per GPU, prepared; then one per block, on demand, seeing its GPUs in order") {
  auto groups = kcoral::worker_groups({"GPU-a", "GPU-b", "GPU-c"}, 3);
  REQUIRE(groups.size() == 5);
  for (std::size_t gpu = 0; gpu < 3; ++gpu) {
    CAPTURE(gpu);
    CHECK_FALSE(groups[gpu].on_demand);
    CHECK(groups[gpu].gpus == std::vector<std::size_t>{gpu});
  }
  CHECK(groups[1].visible_devices == "GPU-b");
  CHECK(groups[3].on_demand);
  CHECK(groups[3].visible_devices == "GPU-a,GPU-b");
  CHECK(groups[3].gpus == std::vector<std::size_t>{0, 1});
  CHECK(groups[4].visible_devices == "GPU-a,GPU-b,GPU-c");
  CHECK(groups[4].gpus == std::vector<std::size_t>{0, 1, 2});
  // A CPU server: its one group, for no device.
  auto cpu = kcoral::worker_groups({""}, 1);
  REQUIRE(cpu.size() == 1);
  CHECK(cpu[0].visible_devices.empty());
  CHECK_FALSE(cpu[0].on_demand);
}

TEST_CASE("one-queue workers (auto): per GPU one queue and a rerun group of CUDA's queues; sets keep CUDA's") {
  auto groups = kcoral::worker_groups({"GPU-a", "GPU-b"}, 2, std::nullopt);
  REQUIRE(groups.size() == 5);  // two per GPU, the pair, two rerun groups
  for (std::size_t gpu = 0; gpu < 2; ++gpu) {
    CAPTURE(gpu);
    CHECK(groups[gpu].cuda_connections == 1);
    REQUIRE(groups[gpu].rerun_group);
    const kcoral::WorkerGroup& rerun = groups[*groups[gpu].rerun_group];
    CHECK(*groups[gpu].rerun_group == 3 + gpu);
    CHECK(rerun.on_demand);
    CHECK(rerun.gpus == std::vector<std::size_t>{gpu});
    CHECK(rerun.visible_devices == groups[gpu].visible_devices);
    CHECK(rerun.cuda_connections == 0);
    CHECK_FALSE(rerun.rerun_group);
  }
  CHECK(groups[2].gpus == std::vector<std::size_t>{0, 1});
  CHECK(groups[2].cuda_connections == 0);
  CHECK_FALSE(groups[2].rerun_group);
  // A rerun group is never where a program of one GPU is sent first.
  CHECK_FALSE(kcoral::least_loaded_block(groups, 1, {0, 0}));
  CHECK(kcoral::least_loaded_block(groups, 2, {0, 0}) == 2u);
  // A number: every worker has that many queues, and none runs a program again.
  for (int connections : {0, 1, 4}) {
    CAPTURE(connections);
    auto fixed = kcoral::worker_groups({"GPU-a", "GPU-b"}, 2, connections);
    REQUIRE(fixed.size() == 3);
    for (const kcoral::WorkerGroup& group : fixed) {
      CHECK(group.cuda_connections == connections);
      CHECK_FALSE(group.rerun_group);
    }
  }
}

TEST_CASE("a program goes to the block of its size whose GPUs have the fewest programs; ties to the lowest") {
  // Groups 0-3 per GPU; 4 {0,1}, 5 {2,3}, 6 {0,1,2}, 7 {0,1,2,3}.
  auto groups = kcoral::worker_groups({"a", "b", "c", "d"}, 4);
  CHECK(kcoral::least_loaded_block(groups, 2, {0, 0, 0, 0}) == 4u);
  CHECK(kcoral::least_loaded_block(groups, 2, {1, 0, 0, 0}) == 5u);
  CHECK(kcoral::least_loaded_block(groups, 2, {0, 0, 1, 1}) == 4u);
  CHECK(kcoral::least_loaded_block(groups, 2, {1, 1, 0, 2}) == 4u);  // 2 against 2: the lower
  CHECK(kcoral::least_loaded_block(groups, 2, {2, 2, 0, 3}) == 5u);  // summed: 3 against 4
  CHECK(kcoral::least_loaded_block(groups, 3, {9, 9, 9, 9}) == 6u);  // the one block of three
  CHECK(kcoral::least_loaded_block(groups, 4, {0, 0, 0, 0}) == 7u);
  CHECK_FALSE(kcoral::least_loaded_block(groups, 5, {0, 0, 0, 0}).has_value());
  CHECK_FALSE(kcoral::least_loaded_block(groups, 1, {0, 0, 0, 0}).has_value());  // per-GPU groups are no block
}

}  // TEST_SUITE
