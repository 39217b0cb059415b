// The messages between the front and its workers, encoded for a Channel.
//
// front -> worker   {"type":"blobs","digests":[…]} + one memfd per digest (batched)
//                   {"type":"run","request_id",…,"program":"<json>"}
//                   {"type":"lease_granted"}
// worker -> front   {"type":"progress","index":i}     before instruction i
//                   {"type":"lease","acquire":bool}   ask for / give back the GPU
//                   {"type":"init_lease","acquire":bool}  the same, to make a CUDA context
//                   {"type":"gpu_access"}            a cpu_only call just used the GPU
//                   {"type":"failed","message":…}    the worker could not prepare itself
//                   {"type":"result",…} + one memfd per binary part
// zygote <-> front  {"type":"fork","visible_devices":…} / {"type":"ready","versions":{…}},
//                   {"type":"forked","pid":p} + the child's channel, {"type":"exited",…}
// Both ends are this project's code, so parsing is by nlohmann::json, not the strict codec.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "channel.hpp"
#include "kcoral/blob_store.hpp"
#include "kcoral/program_result.hpp"

namespace kcoral {

struct RunRequest {
  std::string request_id;
  std::string program_json;
  std::uint64_t output_limit_bytes = 1u << 20;
  std::uint64_t max_binary_bytes = 256u << 20;
};

// Sends the blobs (in batches of descriptors) and then the run message.
[[nodiscard]] Status send_run(const Channel& channel, const RunRequest& request, const BlobMap& blobs);

// Sends a finished program's result with its parts as descriptors; `continues` says
// whether this worker takes another program afterwards.
[[nodiscard]] Status send_result(const Channel& channel, const ProgramResult& result, bool continues = false);
[[nodiscard]] Result<ProgramResult> decode_result(Message message);

// The "type" field of a message, or "" when it has none.
[[nodiscard]] std::string message_type(const std::string& json);

}  // namespace kcoral
