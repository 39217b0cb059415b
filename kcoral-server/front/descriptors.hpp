// Descriptors: the process's descriptor limit, and how the server divides it.
//
// Every connection, every cached memfd and every worker channel is a descriptor, and a
// process out of descriptors can accept nothing, not even GET /health. So the server
// raises its soft limit to the hard one at start, then checks that its own bounds
// (connections, the blob cache's files, workers, a reserve) fit under it, lowering the
// connection and cache bounds where they do not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kcoral {

// Raises RLIMIT_NOFILE's soft limit to its hard limit; returns the soft limit now.
std::uint64_t raise_descriptor_limit();

// Descriptors this process has open now (from /proc/self/fd).
[[nodiscard]] std::size_t open_descriptors();

struct DescriptorPlan {
  std::size_t max_connections = 0;
  std::size_t blob_cache_files = 0;
  std::string adjusted;  // what was lowered and why; empty when the bounds fit
};

// Connections past max_connections that are still answered (503 to /execute, /health and
// /metrics as usual): one request each, with a short header timeout.
inline constexpr std::size_t kOverflowConnections = 64;

// Fits the bounds under `limit`: each connection may hold its socket and its request's
// memfd; each worker its channel, a spare and a result; plus a fixed reserve for the
// listener, the zygote, logs and libraries. Empty max_connections (0) means: cannot fit.
[[nodiscard]] DescriptorPlan plan_descriptors(std::uint64_t limit, std::size_t max_connections,
                                              std::size_t blob_cache_files, std::size_t workers);

}  // namespace kcoral
