// The life of a worker child: ready, blobs, run, clean up, result.
#include "worker_child.hpp"

#include <nlohmann/json.hpp>

#include "process_tree.hpp"
#include "worker_protocol.hpp"

namespace kcoral {

using Json = nlohmann::json;

int serve_one_program(Executor& executor, Channel channel, const std::string& work_root) {
  // Before the program arrives, not after: this child was forked ahead of time.
  executor.warm_up(work_root);
  if (!channel.send(R"({"type":"ready"})")) return 1;
  BlobMap blobs;
  Json run;
  while (run.is_null()) {
    auto message = channel.receive();
    if (!message || !*message) return 0;  // the front let this worker go
    Json json = Json::parse((*message)->json, nullptr, false);
    std::string type = json.is_object() ? json.value("type", "") : "";
    if (type == "blobs") {
      const Json& digests = json.at("digests");
      for (std::size_t i = 0; i < digests.size() && i < (*message)->fds.size(); ++i) {
        auto blob = Blob::from_fd(std::move((*message)->fds[i]));
        if (blob) blobs.emplace(digests[i].get<std::string>(), std::move(*blob));
      }
    } else if (type == "run") {
      run = std::move(json);
    }
  }

  ProgramResult result;
  auto program = Program::parse(run.at("program").get<std::string>());
  if (!program) {
    result.error = InstructionError{ErrorKind::engine, "the worker could not read the program: " +
                                                           program.error().message,
                                    0, "upload", std::nullopt, "", std::nullopt};
  } else {
    RunOptions options;
    options.output_limit_bytes = run.at("output_limit_bytes").get<std::uint64_t>();
    options.max_binary_bytes = run.at("max_binary_bytes").get<std::uint64_t>();
    options.work_root = work_root;
    options.on_instruction = [&channel](std::size_t index) {
      (void)channel.send(Json{{"type", "progress"}, {"index", index}}.dump());
    };
    NoGpuLease lease;
    result = executor.run(*program, blobs, lease, options);
  }
  // The response is the program's end: nothing it started may outlive it.
  kill_descendants();
  return send_result(channel, result) ? 0 : 1;
}

}  // namespace kcoral
