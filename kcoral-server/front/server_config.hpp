// ServerConfig: every setting of kcoral-server, with its default (see `--help`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sandbox_policy.hpp"

namespace kcoral {

struct ServerConfig {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;  // 0: pick a free port and print it
  std::string device = "cpu";
  std::size_t num_workers = 0;  // 0: one per CPU core (cpu mode)
  std::vector<int> gpus{0};     // gpu mode: NVML device indexes
  std::size_t workers_per_gpu = 2;
  std::size_t programs_per_worker = 1;  // 1: every program in a fresh process
  // Processes that fork workers side by side (worker/zygote.hpp); 0 (auto): a quarter of
  // the cores, 1 to 4, on a CPU server of fresh workers, else 1 (fill_in_defaults).
  std::size_t fork_parents = 0;
  // With programs_per_worker > 1: "state" retires a worker whose state a program changed
  // (worker/reuse_baseline.hpp), "none" reuses it in full trust.
  std::string reuse_check = "state";
  // Measured (benchmarks/gpu/results/2026-12-05-h100-contexts-one-queue.md): with one-queue
  // workers, 8 at once gave 11.3-13.3 fresh programs/s on an H100 against 11.3-11.6 with 4
  // and 9.2 with 2, every timing the same; as many workers are prepared, each holding about
  // 520 MiB of the GPU for its context.
  std::size_t context_inits_at_once = 8;
  // GPU workers' CUDA_DEVICE_MAX_CONNECTIONS; 0 leaves CUDA's default (8), or what
  // --program-env gives. Fewer hardware queues make contexts about twice as fast to create and
  // destroy (benchmarks/gpu/results), at the cost of false dependencies between streams.
  // nullopt (auto): one queue, and a program whose benchmark() timed work on several
  // streams runs again on a worker of CUDA's default queues (worker_groups.hpp).
  std::optional<int> cuda_connections;
  double default_timeout_seconds = 300;
  double max_timeout_seconds = 900;
  double queue_timeout_seconds = 1800;
  std::uint64_t max_request_bytes = 256ull << 20;
  std::uint64_t max_response_bytes = 256ull << 20;
  std::uint64_t default_output_limit_bytes = 1ull << 20;
  std::uint64_t max_output_limit_bytes = 16ull << 20;
  std::uint64_t blob_cache_bytes = 4ull << 30;
  std::size_t blob_cache_max_blobs = 65536;
  std::size_t blob_cache_max_files = 4096;  // descriptors the cache may hold
  std::string disk_cache_dir;               // empty: no disk cache
  std::uint64_t disk_cache_bytes = 16ull << 30;
  std::size_t disk_cache_max_blobs = std::size_t{1} << 18;  // its index takes about 500 bytes of memory a blob

  // Clients (README: Limits). A request's memory, descriptors and time are bounded from
  // its first byte, so that no client, however slow or many, can starve the others.
  std::size_t max_connections = 4096;
  // The connections one tenant may hold, from the first request that shows its token (0:
  // all of them on a server of one tenant, else half of max_connections).
  std::size_t max_connections_per_tenant = 0;
  std::uint64_t max_inflight_bytes = 1ull << 30;  // request bodies held at once, server-wide
  // Tenants (tenants.hpp): each one's programs waiting for a worker, and its part of
  // max_inflight_bytes (0: all of it with one tenant, else half, at least max_request_bytes).
  std::size_t max_queued_per_tenant = 256;
  std::uint64_t max_inflight_bytes_per_tenant = 0;
  double idle_timeout_seconds = 75;               // a kept-alive connection with no request
  double header_timeout_seconds = 10;             // a request's first byte to its last header byte
  // With --token-file: connections that have shown no accepted token yet
  // (anonymous_connections.hpp). 0: a quarter of max_connections.
  std::size_t max_anonymous_connections = 0;
  std::size_t max_anonymous_per_address = 32;
  double anonymous_idle_timeout_seconds = 5;  // their wait for a request, the first one too
  std::uint64_t min_body_bytes_per_second = 16384;  // request bodies, and responses
  double body_rate_window_seconds = 10;
  double shutdown_grace_seconds = 30;
  std::size_t io_threads = 0;  // 0: from the core count
  std::string work_root;       // empty: $TMPDIR/kcoral-<pid>
  // The Python that runs the worker parent and the workers, with kcoral's server side
  // installed. Empty: python3 beside this binary (the environment it was installed
  // into), else $KCORAL_PYTHON, else python3 on PATH (worker_python()).
  std::string python;
  // What the worker parent imports once, before it forks the workers, of what its Python
  // has installed (each only if its import leaves CUDA untouched): programs do not pay it.
  // kcoral.builtins (benchmark, compile_tirx) brings the kcoral package and its client's
  // modules: some 170 that a reused worker would otherwise see a program import; and
  // kcoral._native, which benchmark() imports when first called.
  std::vector<std::string> preload{"numpy", "torch", "triton", "tvm", "tvm.script.tirx", "tvm_ffi", "cutlass",
                                   "cutlass.cute", "kcoral.builtins", "kcoral._native"};
  std::string token_file;      // tenants and their bearer tokens (tenants.hpp); empty: no access control
  std::string log_dir;         // the event log's directory; empty: no event log
  std::uint64_t log_max_bytes = 64ull << 20;
  std::size_t log_files = 5;
  // HAProxy's agent check (kcoral-server/front/agent.hpp): absent, none; 0, a free port.
  std::optional<std::uint16_t> agent_port;

  // The sandbox of every program (see kcoral-server/worker/sandbox.hpp).
  std::string sandbox = "namespaces";  // or "none"
  SandboxPolicy sandbox_policy;  // limits, outside users, readable paths
  // Each tenant's compile cache (kcoral-server/front/compile_caches.hpp), in memory; 0: none.
  std::uint64_t compile_cache_bytes = 1ull << 30;
  std::vector<std::string> program_environment;  // --program-env NAME=VALUE, in order
};

}  // namespace kcoral
