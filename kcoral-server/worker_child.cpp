// The life of a worker child: prepare, ready, then blobs, run, clean up, result.
#include "worker_child.hpp"

#include <nlohmann/json.hpp>

#include "process_tree.hpp"
#include "remote_lease.hpp"
#include "worker_protocol.hpp"

namespace kcoral {
namespace {

using Json = nlohmann::json;

// Makes the CUDA context, one worker at a time per GPU (the front's init lease), so
// contexts are not created all at once when many workers start together.
Status prepare_gpu(Executor& executor, const Channel& channel) {
  RemoteLease init_lease(channel, "init_lease");
  if (auto status = init_lease.acquire(); !status) return status;
  return executor.prepare_device();
}

// Receives the next program (blobs first); nullopt when the front let this worker go.
std::optional<Json> next_run(const Channel& channel, BlobMap& blobs) {
  while (true) {
    auto message = channel.receive();
    if (!message || !*message) return std::nullopt;
    Json json = Json::parse((*message)->json, nullptr, false);
    std::string type = json.is_object() ? json.value("type", "") : "";
    if (type == "blobs") {
      const Json& digests = json.at("digests");
      for (std::size_t i = 0; i < digests.size() && i < (*message)->fds.size(); ++i) {
        auto blob = Blob::from_fd(std::move((*message)->fds[i]));
        if (blob) blobs.emplace(digests[i].get<std::string>(), std::move(*blob));
      }
    } else if (type == "run") {
      return json;
    }
  }
}

ProgramResult run_one(Executor& executor, const Channel& channel, const Json& run, const BlobMap& blobs,
                      const WorkerChildOptions& options) {
  auto program = Program::parse(run.at("program").get<std::string>());
  if (!program) {
    ProgramResult result;
    result.error = InstructionError{ErrorKind::engine,
                                    "the worker could not read the program: " + program.error().message,
                                    0, "upload", std::nullopt, "", std::nullopt};
    return result;
  }
  RunOptions run_options;
  run_options.output_limit_bytes = run.at("output_limit_bytes").get<std::uint64_t>();
  run_options.max_binary_bytes = run.at("max_binary_bytes").get<std::uint64_t>();
  run_options.work_root = options.work_root;
  run_options.on_instruction = [&channel](std::size_t index) {
    (void)channel.send(Json{{"type", "progress"}, {"index", index}}.dump());
  };
  run_options.on_gpu_access = [&channel](const GpuAccessDetail&) {
    (void)channel.send(R"({"type":"gpu_access"})");
  };
  if (!options.gpu) {
    NoGpuLease lease;
    return executor.run(*program, blobs, lease, run_options);
  }
  RemoteLease lease(channel, "lease");
  return executor.run(*program, blobs, lease, run_options);
}

}  // namespace

int serve_programs(Executor& executor, const Channel& channel, const WorkerChildOptions& options) {
  // Before the first program arrives, not after: this child was forked ahead of time.
  executor.warm_up(options.work_root);
  if (options.gpu) {
    if (auto status = prepare_gpu(executor, channel); !status) {
      (void)channel.send(Json{{"type", "failed"}, {"message", status.error().message}}.dump());
      return 1;
    }
  }
  for (std::size_t served = 0; served < options.programs; ++served) {
    if (!channel.send(R"({"type":"ready"})")) return 1;
    BlobMap blobs;
    std::optional<Json> run = next_run(channel, blobs);
    if (!run) return 0;
    ProgramResult result = run_one(executor, channel, *run, blobs, options);
    // The response is the program's end: nothing it started may outlive it.
    bool left_processes = kill_descendants() > 0;
    bool continues = served + 1 < options.programs && !result.device_lost && !left_processes;
    if (!send_result(channel, result, continues)) return 1;
    if (!continues) return result.device_lost ? 2 : 0;
  }
  return 0;
}

}  // namespace kcoral
