// Server: kcoral-server's parts wired together (I/O threads, listener, blob store and disk
// cache, compile caches, worker pool, metrics, event log, HAProxy agent) and its life from
// start to a graceful stop on SIGTERM/SIGINT.
#pragma once

#include "server_config.hpp"

namespace kcoral {

// Runs until stopped by a signal; returns the process exit code.
[[nodiscard]] int run_server(ServerConfig config);

}  // namespace kcoral
