// kcoral-server: the HTTP front of KCoral. See `kcoral-server --help`.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <tuple>

#include "program_environment.hpp"
#include "server.hpp"
#include "user_id_pool.hpp"

int main(int argc, char** argv) {
  kcoral::ServerConfig config;
  CLI::App app{
      "kcoral-server: runs uploaded KCoral programs (POST /execute) in fresh worker processes and "
      "answers with their results; GET /health and GET /metrics describe the server."};
  app.get_formatter()->column_width(40);
  app.add_option("--device", config.device, "Where programs run: cpu, or gpu (one worker set per GPU)")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  app.add_option("--host", config.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", config.port, "Port to listen on; 0 picks a free one and prints it")
      ->capture_default_str();
  app.add_option("--num-workers", config.num_workers,
                 "Programs run at once on a CPU server (each in its own process); 0 = one per core")
      ->capture_default_str();
  app.add_option("--gpus", config.gpus, "GPU server: the GPUs to use, by index (comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--workers-per-gpu", config.workers_per_gpu,
                 "GPU server: worker processes per GPU (one holds the GPU at a time; the others compile, "
                 "check, or wait)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--context-inits-at-once", config.context_inits_at_once,
                 "GPU server: workers of one GPU that may make their CUDA context at the same time "
                 "(with a fresh worker per program, context making bounds programs per second; 1 keeps "
                 "it strictly sequential; 8 gave 11.3-13.3 fresh programs per second on an H100, 4 gave 11.3-11.6, "
                 "and as many workers are prepared, each holding about 520 MiB of the GPU)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--cuda-connections",
         [&config](const std::string& value) {
           config.cuda_connections = value == "auto" ? std::nullopt : std::optional<int>(std::stoi(value));
         },
         "GPU server: CUDA_DEVICE_MAX_CONNECTIONS of the workers: the hardware queues of their CUDA "
         "contexts (1-32; 0 keeps CUDA's default of 8). One queue makes a fresh worker's context more "
         "than twice as fast to make, but work on different streams then runs one after the other. auto "
         "(the default): one queue, and a program whose benchmark() finds a call's work on several "
         "streams runs again, from the start, on a worker of CUDA's default queues, so that such a call "
         "is timed as CUDA runs it")
      ->check(CLI::IsMember({"auto"}) | CLI::Range(0, 32))
      ->default_str("auto");
  app.add_option("--programs-per-worker", config.programs_per_worker,
                 "Programs a worker process runs before it is replaced; 1 gives every program a fresh "
                 "process (the default; more is faster but lets one program's state reach the next)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--fork-parents",
         [&config](const std::string& value) {
           config.fork_parents = value == "auto" ? 0 : static_cast<std::size_t>(std::stoul(value));
         },
         "Processes that fork fresh workers side by side, copies of the worker parent (1-64): the kernel "
         "forks one address space at a time, and a worker parent holding large libraries (torch) takes "
         "milliseconds a fork, so that one alone makes only a few hundred workers a second. auto (the "
         "default): a quarter of the cores, 1 to 4, on a CPU server of fresh workers; 1 on a GPU server "
         "(CUDA's contexts set the pace there) or with --programs-per-worker above 1")
      ->check(CLI::IsMember({"auto"}) | CLI::Range(1, 64))
      ->default_str("auto");
  app.add_option("--reuse-check", config.reuse_check,
                 "With --programs-per-worker above 1: 'state' retires a worker as soon as a program leaves "
                 "its state other than it was (threads, open files, environment, imported modules, GPU "
                 "memory held by torch, processes); 'none' reuses it whatever the program left")
      ->check(CLI::IsMember({"state", "none"}))
      ->capture_default_str();
  app.add_option("--default-timeout-seconds", config.default_timeout_seconds,
                 "Execution limit of a program that asks for none")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-timeout-seconds", config.max_timeout_seconds,
                 "Largest execution limit a program may ask for (larger requests are clamped)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--queue-timeout-seconds", config.queue_timeout_seconds,
                 "How long an accepted program may wait for a free worker before 503 busy")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-request-bytes", config.max_request_bytes,
                 "Largest request body; larger ones get 413")
      ->capture_default_str();
  app.add_option("--max-response-bytes", config.max_response_bytes,
                 "Largest response body; a program returning more fails with 500 response_too_large")
      ->capture_default_str();
  app.add_option("--output-limit-bytes", config.default_output_limit_bytes,
                 "Captured stdout/stderr kept per stream when a program asks for no limit")
      ->capture_default_str();
  app.add_option("--max-output-limit-bytes", config.max_output_limit_bytes,
                 "Largest per-stream capture limit a program may ask for")
      ->capture_default_str();
  app.add_option("--blob-cache-bytes", config.blob_cache_bytes,
                 "Memory for cached uploads (content-addressed, least recently used first)")
      ->capture_default_str();
  app.add_option("--blob-cache-max-blobs", config.blob_cache_max_blobs, "Blobs the cache keeps at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--blob-cache-max-files", config.blob_cache_max_files,
                 "Memory files (descriptors) the cache keeps at most; the blobs of one request share one")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--disk-cache-dir", config.disk_cache_dir,
                 "Directory that keeps uploaded blobs on disk too, so that they survive a restart; a blob "
                 "missing from memory is looked for there before the client is asked for it; it must belong to the "
                 "server's user and be writable by no one else (made 0700 if missing)");
  app.add_option("--disk-cache-bytes", config.disk_cache_bytes,
                 "Disk for --disk-cache-dir (least recently used first); a blob is charged its 4 KiB blocks and "
                 "one more")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--disk-cache-max-blobs", config.disk_cache_max_blobs,
                 "Blobs --disk-cache-dir keeps at most (least recently used first); its index takes about 500 "
                 "bytes of the server's memory a blob")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--io-threads", config.io_threads, "Threads serving HTTP; 0 = 2 (steps that take long run on threads of their own)")
      ->capture_default_str();
  app.add_option("--work-root", config.work_root,
                 "Directory for programs' working directories (default: $TMPDIR/kcoral-<pid>)");
  app.add_option("--python", config.python,
                 "Python that runs the workers, with kcoral's server side installed (default: python3 beside "
                 "kcoral-server, else $KCORAL_PYTHON, else python3 on PATH)");
  app.add_option("--preload", config.preload,
                 "Modules the worker parent imports once, before it forks workers, so that programs do not pay "
                 "for them (comma-separated; 'none' for none). Those not installed are skipped, and one whose "
                 "import starts threads or opens a CUDA device is left out; the start line says which")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--log-dir", config.log_dir,
                 "Directory of the event log: one JSON line per POST /execute in events.jsonl (request id, "
                 "client, outcome, error kind, program shape, timings, sizes); with --token-file, those of requests "
                 "without an accepted token in anonymous.jsonl, rotated on its own");
  app.add_option("--log-max-bytes", config.log_max_bytes, "Size at which the event log's file is rotated")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--log-files", config.log_files, "Event log files kept, the current one included")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--token-file", config.token_file,
                 "File of tenants and their bearer tokens, one per line: `NAME TOKEN`, or a bare TOKEN (its tenant "
                 "named tenant-<line number>); lines of one name are that tenant's tokens. Then every request but "
                 "GET /health needs `Authorization: Bearer <token>` (else 401), and tenants are kept apart: blobs, "
                 "queue, in-flight bytes, and their names in /metrics and the event log. Keep it readable by the "
                 "server's user only")
      ->check(CLI::ExistingFile);

  auto* clients = app.add_option_group("Clients", "What one client may hold (docs/operating.md: Limits)");
  clients
      ->add_option("--max-connections", config.max_connections,
                   "Connections served at once; a few more are answered 503 (/health and /metrics as usual). "
                   "Lowered at start when the descriptor limit cannot hold them")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  clients
      ->add_option("--max-connections-per-tenant", config.max_connections_per_tenant,
                   "Connections one tenant may hold (from its first request with its token); its next one is "
                   "answered 503 busy, so that one tenant's idle connections cannot keep the others out (0: all "
                   "of them on a server of one tenant, else half of --max-connections)")
      ->capture_default_str();
  clients
      ->add_option("--max-inflight-bytes", config.max_inflight_bytes,
                   "Request bytes held at once by all requests, from their first body byte to their answer; "
                   "a request that does not fit is answered 503 busy with Retry-After. At least --max-request-bytes")
      ->capture_default_str();
  clients
      ->add_option("--max-queued-per-tenant", config.max_queued_per_tenant,
                   "Programs one tenant may have waiting for a worker; its next one is answered 503 busy with "
                   "Retry-After (workers are shared fairly across tenants either way)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  clients
      ->add_option("--max-inflight-bytes-per-tenant", config.max_inflight_bytes_per_tenant,
                   "One tenant's part of --max-inflight-bytes; past it, that tenant's next request is answered 503 "
                   "busy with Retry-After (0: all of it on a server of one tenant, else half of it, and at least "
                   "--max-request-bytes). At least --max-request-bytes")
      ->capture_default_str();
  clients
      ->add_option("--idle-timeout-seconds", config.idle_timeout_seconds,
                   "How long a kept-alive connection may wait with no request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  clients
      ->add_option("--header-timeout-seconds", config.header_timeout_seconds,
                   "How long a request may take from its first byte to the end of its header")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  clients
      ->add_option("--max-anonymous-connections", config.max_anonymous_connections,
                   "With --token-file: connections that have not shown an accepted token yet, in all; past it, "
                   "the longest-held of them is closed for a newcomer, and connections with a token are never "
                   "touched (0: a quarter of --max-connections)")
      ->capture_default_str();
  clients
      ->add_option("--max-anonymous-per-address", config.max_anonymous_per_address,
                   "With --token-file: such connections from one address; a further one is closed at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  clients
      ->add_option("--anonymous-idle-timeout-seconds", config.anonymous_idle_timeout_seconds,
                   "With --token-file: how long such a connection may wait for a request, its first included")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  clients
      ->add_option("--min-body-bytes-per-second", config.min_body_bytes_per_second,
                   "Slowest body kept, either way: a request body that brings fewer bytes than this per second, "
                   "over any window below, is answered 408 and its connection closed; a response read slower is "
                   "cut off and dropped")
      ->capture_default_str();
  clients
      ->add_option("--body-rate-window-seconds", config.body_rate_window_seconds,
                   "The window over which the body rate is measured (also the longest a response may wait for "
                   "its reader to take a byte)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  clients
      ->add_option("--shutdown-grace-seconds", config.shutdown_grace_seconds,
                   "On SIGTERM or SIGINT: how long running programs may go on; then they are killed and answered "
                   "503. A second signal stops at once")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  auto* balancer = app.add_option_group("Balancer", "Behind HAProxy (docs/operating.md: Scale-out behind HAProxy)");
  balancer
      ->add_option("--agent-port", config.agent_port,
                   "Port (on --host) that answers HAProxy's agent check with this server's weight from its "
                   "load (\"75%\"; \"0%\" while shutting down); 0 picks a free port and prints it. Off unless given")
      ->check(CLI::Range(0, 65535));

  auto* sandbox = app.add_option_group("Sandbox", "What every program may see and use (docs/security.md)");
  sandbox
      ->add_option("--sandbox", config.sandbox,
                   "namespaces: each program in its own user, PID, mount, IPC and network namespaces, as an "
                   "unprivileged user, with a read-only system, private scratch space, a seccomp filter and the "
                   "limits below; none: no isolation at all (only for machines that cannot make namespaces; "
                   "programs can then read and disturb everything the server can)")
      ->check(CLI::IsMember({"namespaces", "none"}))
      ->capture_default_str();
  sandbox
      ->add_option("--memory-limit-bytes", config.sandbox_policy.memory_bytes,
                   "Memory of each program: all its processes together, with the tmpfs and memfd pages they write, "
                   "no swap, where control groups can be made (past it the whole program is killed and fails "
                   "`runtime`, naming this limit); and of each of its processes alone: its address space on a CPU "
                   "server, its data segment on a GPU server (CUDA reserves address space far beyond memory)")
      ->capture_default_str();
  sandbox->add_option("--file-size-limit-bytes", config.sandbox_policy.file_size_bytes, "Largest file a program may write")
      ->capture_default_str();
  sandbox
      ->add_option("--process-limit", config.sandbox_policy.processes,
                   "Processes and threads of one program (its control group, and RLIMIT_NPROC of its own user)")
      ->capture_default_str();
  sandbox
      ->add_option("--open-files-limit", config.sandbox_policy.open_files,
                   "Open files of each program process; with --process-limit, the most host descriptors one program "
                   "can hold (1024 x 256 = 262,144 by default)")
      ->capture_default_str();
  sandbox
      ->add_option("--scratch-bytes", config.sandbox_policy.scratch_bytes,
                   "Private writable space of one program (memory-backed): its working directory, /tmp, "
                   "/var/tmp, /dev/shm and HOME together, with an inode per 16 KiB of it; gone when the program ends")
      ->capture_default_str();
  sandbox
      ->add_option("--compile-cache-bytes", config.compile_cache_bytes,
                   "Each tenant's compile cache (memory-backed, for the server's life; 0: none): what Triton, TVM FFI, "
                   "CuTeDSL, compile_tirx, torch and the CUDA driver compile for one of its programs, the next ones "
                   "find; never another tenant's. Least recently used entries go once it is three quarters full")
      ->capture_default_str();
  // Never root: what only root may read stays unreadable to programs.
  std::string uid_range = std::to_string(config.sandbox_policy.first_uid) + "-" + std::to_string(config.sandbox_policy.last_uid);
  sandbox
      ->add_option("--sandbox-uid-range", uid_range,
                   "Outside user ids of the workers, FIRST-LAST (uid and gid alike; not 0), when the server runs as "
                   "root: each live worker runs as one of its own, so that the kernel's per-user counts (processes, "
                   "inotify instances, pipe buffers, user namespaces) are each program's. At least four ids per "
                   "worker; give each server on a host a range of its own. A server not run as root runs every "
                   "program as its own user")
      ->check([](const std::string& text) {
        auto range = kcoral::parse_id_range(text);
        return range ? std::string() : range.error().message;
      })
      ->capture_default_str();
  sandbox->add_option("--readable-path", config.sandbox_policy.readable_paths,
                      "A path programs may read besides the system (/usr, /etc, /opt, parts of /sys) and the Python "
                      "environment (repeatable)");
  sandbox
      ->add_option("--program-env", config.program_environment,
                   "NAME=VALUE for every program's environment (repeatable), which is otherwise a fixed list: PATH "
                   "(the worker's Python's bin first; a PATH given here follows it instead of the system's), HOME, "
                   "TMPDIR, LANG, USER, LOGNAME and the GPU's variables; nothing of this server's environment")
      ->check([](const std::string& text) {
        auto variable = kcoral::parse_environment_assignment(text);
        return variable ? std::string() : variable.error().message;
      });
  CLI11_PARSE(app, argc, argv);
  if (config.preload == std::vector<std::string>{"none"}) config.preload.clear();
  if (config.max_inflight_bytes < config.max_request_bytes) {
    std::fprintf(stderr, "kcoral-server: --max-inflight-bytes (%llu) must be at least --max-request-bytes (%llu)\n",
                 static_cast<unsigned long long>(config.max_inflight_bytes),
                 static_cast<unsigned long long>(config.max_request_bytes));
    return 2;
  }
  if (config.max_inflight_bytes_per_tenant != 0 && config.max_inflight_bytes_per_tenant < config.max_request_bytes) {
    std::fprintf(stderr,
                 "kcoral-server: --max-inflight-bytes-per-tenant (%llu) must be 0 or at least --max-request-bytes "
                 "(%llu)\n",
                 static_cast<unsigned long long>(config.max_inflight_bytes_per_tenant),
                 static_cast<unsigned long long>(config.max_request_bytes));
    return 2;
  }
  if (config.max_timeout_seconds < config.default_timeout_seconds)
    config.default_timeout_seconds = config.max_timeout_seconds;
  std::tie(config.sandbox_policy.first_uid, config.sandbox_policy.last_uid) = *kcoral::parse_id_range(uid_range);
  return kcoral::run_server(std::move(config));
}
