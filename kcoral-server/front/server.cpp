// run_server: start workers, then listen; on a signal, refuse new work, finish what runs.
#include "server.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <expected>
#include <string_view>
#include <sstream>
#include <thread>

#include "kcoral/gpu_inventory.hpp"
#include "kcoral/request_id.hpp"
#include "agent.hpp"
#include "descriptors.hpp"
#include "executable_path.hpp"
#include "listener.hpp"

namespace kcoral {
namespace {

// The Python of the workers (ServerConfig::python): `chosen`, else python3 beside this
// binary (the environment it was installed into), else $KCORAL_PYTHON, else python3 on
// PATH; as it is when none of them can run, for the start to say so.
std::string worker_python(const std::string& chosen) {
  if (!chosen.empty()) return chosen;
  auto runnable = [](const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; };
  if (std::string beside = beside_this_binary("python3"); runnable(beside)) return beside;
  if (const char* named = std::getenv("KCORAL_PYTHON"); named != nullptr && runnable(named)) return named;
  std::string_view path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  for (std::size_t start = 0; start <= path.size();) {
    std::size_t end = std::min(path.find(':', start), path.size());
    if (std::string candidate = std::string(path.substr(start, end - start)) + "/python3";
        end > start && runnable(candidate))
      return candidate;
    start = end + 1;
  }
  return "python3";
}

// The worker parent's command line, from the server's flags.
WorkerOptions worker_options(const ServerConfig& config) {
  WorkerOptions out;
  out.device = config.device;
  out.work_root = config.work_root;
  out.init_path = beside_this_binary("kcoral-init");
  out.preload = config.preload;
  out.programs_per_worker = config.programs_per_worker;
  out.fork_parents = config.fork_parents;
  out.reuse_check = config.reuse_check == "state";
  out.sandboxed = config.sandbox == "namespaces";
  out.sandbox_policy = config.sandbox_policy;
  out.compile_cache_bytes = config.compile_cache_bytes;
  out.program_environment = config.program_environment;
  return out;
}

// One line on what programs run in, printed at start.
std::string sandbox_summary(const ServerConfig& config) {
  if (config.sandbox == "none")
    return "sandbox: none -- programs run unisolated, as this server's user, and can read and disturb "
           "everything it can";
  std::ostringstream out;
  out << "sandbox: namespaces (user, PID, mount, IPC, network, cgroup); programs run as an unprivileged user with "
         "a read-only system, "
      << (config.sandbox_policy.scratch_bytes >> 20) << " MiB private scratch, seccomp, memory "
      << (config.sandbox_policy.memory_bytes >> 20) << " MiB, files " << (config.sandbox_policy.file_size_bytes >> 20)
      << " MiB, " << config.sandbox_policy.processes << " processes, " << config.sandbox_policy.open_files
      << " open files per process, and the programs' own environment";
  return out.str();
}

// The compile caches, in a sandbox where this host can mount them (none otherwise), and the
// start line's account of them.
std::pair<std::unique_ptr<CompileCaches>, std::string> open_compile_caches(const ServerConfig& config) {
  if (config.sandbox == "none")
    return {nullptr, "compile caches: none (--sandbox none: programs use the server user's own)"};
  if (config.compile_cache_bytes == 0) return {nullptr, "compile caches: none (--compile-cache-bytes 0)"};
  auto opened = CompileCaches::open({config.work_root + "/compile-cache", config.compile_cache_bytes});
  if (!opened)
    return {nullptr, "compile caches: none, this host cannot have them: " + opened.error().message +
                         "; each program compiles anew"};
  return {std::move(*opened), "compile caches: " + std::to_string(config.compile_cache_bytes >> 20) +
                                  " MiB per tenant, in memory for the server's life (Triton, TVM FFI, CuTeDSL, "
                                  "compile_tirx, torch, the CUDA driver's JIT)"};
}

// A step of the start that failed: what to say, and the exit code (1: the machine or the
// workers, 2: the flags).
struct StartFailure {
  int exit_code;
  std::string message;
};
template <class T>
using Step = std::expected<T, StartFailure>;

std::unexpected<StartFailure> refuse(int exit_code, std::string message) {
  return std::unexpected(StartFailure{exit_code, std::move(message)});
}

// What the flags leave to the machine: worker and thread counts, the work root, the Python.
void fill_in_defaults(ServerConfig& config) {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (config.num_workers == 0) config.num_workers = cores;
  // A quarter of the cores fork fresh CPU workers side by side, 1 to 4 and no more than the
  // workers: on 16 cores, with torch and triton preloaded, 4 took a client's back-to-back
  // programs' queue from 0.78 ms to 0.09 and 8 clients from 346 programs/s to 592 (reused
  // workers: 655; benchmarks/README.md, "Forks side by side"). A GPU server's fresh
  // workers wait for CUDA's contexts, not for forks, and reused ones are forked seldom.
  if (config.fork_parents == 0)
    config.fork_parents = config.device == "cpu" && config.programs_per_worker == 1
                              ? std::clamp<std::size_t>(cores / 4, 1, std::min<std::size_t>(4, config.num_workers))
                              : 1;
  // Two: a lightly loaded server answers sooner with two than with one a core, since each
  // handler the threads share may wake another sleeping thread, and with idle cores that
  // waits for a sleeping core (16 cores, one client's trivial programs on reused workers:
  // 0.075 ms median queue_ms and 0.5 ms of the front's CPU a program with 2 threads, 0.115
  // ms and 0.85 ms with 8; benchmarks/README.md, "The front's long steps"). Nothing long
  // runs on them: what takes as long as a client or a worker makes it runs on the long-step
  // threads (run_server).
  if (config.io_threads == 0) config.io_threads = 2;
  if (config.work_root.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    config.work_root = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/kcoral-" + std::to_string(::getpid());
  }
  config.python = worker_python(config.python);
}

// The pool's shape: one group of CPU workers, or one per GPU of --gpus (with the first
// one's architecture, /health's target), where a program may hold up to every GPU (the
// protocol's most being 8), in the set groups the pool makes for that.
struct PoolShape {
  WorkerPool::Config pool;
  std::string target_arch;
};
Step<PoolShape> shape_pool(const ServerConfig& config) {
  PoolShape shape;
  WorkerPool::Config& pool = shape.pool;
  pool.queue_timeout_seconds = config.queue_timeout_seconds;
  pool.programs_per_worker = config.programs_per_worker;
  // CPU workers make no context: no more of them are prepared than run at once.
  pool.context_inits_at_once = config.device == "gpu" ? config.context_inits_at_once : 1;
  pool.zygote = {config.python, worker_options(config)};
  pool.workers_per_group = config.num_workers;
  // A result's frame holds its returned values' JSON and both captured streams.
  pool.max_message_bytes = config.max_response_bytes + 2 * config.max_output_limit_bytes + (1u << 20);
  pool.max_queued_per_tenant = config.max_queued_per_tenant;
  // A CPU server's programs see the number asked for, if any, and have nothing to run again.
  pool.cuda_connections = config.cuda_connections.value_or(0);
  if (config.device != "gpu") return shape;
  auto gpus = list_gpus();
  if (!gpus) return refuse(1, "--device gpu: " + gpus.error().message);
  pool.groups.clear();
  for (int index : config.gpus) {
    auto gpu = std::find_if(gpus->begin(), gpus->end(), [&](const GpuInfo& g) { return g.index == index; });
    if (gpu == gpus->end())
      return refuse(2, "there is no GPU " + std::to_string(index) + " (this machine has " +
                           std::to_string(gpus->size()) + ")");
    pool.groups.push_back(gpu->uuid);
    pool.gpu_ids.push_back(index);
    if (shape.target_arch.empty()) shape.target_arch = gpu->arch();
    std::fprintf(stderr, "kcoral-server: GPU %d: %s, %s (%s)\n", index, gpu->name.c_str(), gpu->uuid.c_str(),
                 gpu->arch().c_str());
  }
  pool.workers_per_group = config.workers_per_gpu;
  pool.max_gpus_per_program = std::min<std::size_t>(pool.groups.size(), kMaxGpuCount);
  pool.cuda_connections = config.cuda_connections;
  // The operator's own CUDA_DEVICE_MAX_CONNECTIONS (--program-env) is what every worker
  // gets: no one-queue workers, and nothing to run again.
  if (!pool.cuda_connections && std::any_of(config.program_environment.begin(), config.program_environment.end(),
                                            [](const std::string& assignment) {
                                              return assignment.starts_with("CUDA_DEVICE_MAX_CONNECTIONS=");
                                            }))
    pool.cuda_connections = 0;
  if (!pool.cuda_connections)
    std::fprintf(stderr, "kcoral-server: CUDA queues: one per worker's context (fresh contexts twice as fast); a "
                         "program whose benchmark() times work on several streams runs again on a worker of CUDA's "
                         "default queues (--cuda-connections)\n");
  else
    std::fprintf(stderr, "kcoral-server: CUDA queues: %s per worker's context (--cuda-connections)\n",
                 *pool.cuda_connections == 0 ? "CUDA's default" : std::to_string(*pool.cuda_connections).c_str());
  return shape;
}

// What the connections, the blob cache and the workers may hold must fit the descriptor
// limit (raised to its hard limit; the connections and cached files are cut to fit) and
// the sandbox's user ids. Returns the descriptor limit.
Step<std::uint64_t> fit_descriptors_and_users(ServerConfig& config, const WorkerPool::Config& pool) {
  std::uint64_t descriptor_limit = raise_descriptor_limit();
  // Per GPU, its prepared workers and those making contexts; per set or rerun group, the
  // most of its workers that run or start at once (WorkerPool: workers_per_group), forked
  // only for programs of several GPUs or run again, so a bound rarely reached.
  std::size_t workers = pool.groups.size() * (pool.workers_per_group + pool.context_inits_at_once);
  for (const WorkerGroup& group : worker_groups(pool.groups, pool.max_gpus_per_program, pool.cuda_connections))
    if (group.on_demand) workers += pool.workers_per_group;
  DescriptorPlan plan = plan_descriptors(descriptor_limit, config.max_connections, config.blob_cache_max_files, workers);
  if (plan.max_connections == 0)
    return refuse(1, "the descriptor limit of " + std::to_string(descriptor_limit) + " is too low for " +
                         std::to_string(workers) + " workers; raise it (ulimit -n)");
  if (!plan.adjusted.empty()) std::fprintf(stderr, "kcoral-server: %s\n", plan.adjusted.c_str());
  // Every live worker holds a user id of the range until its namespace is gone: the
  // prepared ones, the running ones, and those on their way out.
  std::uint64_t uids = std::uint64_t{config.sandbox_policy.last_uid} - config.sandbox_policy.first_uid + 1;
  if (config.sandbox == "namespaces" && uids < 4 * workers)
    return refuse(2, "--sandbox-uid-range holds " + std::to_string(uids) + " ids, fewer than the " +
                         std::to_string(4 * workers) + " that " + std::to_string(workers) + " workers need");
  config.max_connections = plan.max_connections;
  config.blob_cache_max_files = plan.blob_cache_files;
  return descriptor_limit;
}

// The tenants of --token-file (one, unauthenticated, without it), said at start.
Step<Tenants> load_tenants(const ServerConfig& config) {
  Tenants tenants;
  if (!config.token_file.empty()) {
    auto read = Tenants::read_token_file(config.token_file);
    if (!read) return refuse(2, "--token-file: " + read.error().message);
    tenants = std::move(*read);
    struct stat info {};
    if (::stat(config.token_file.c_str(), &info) == 0 && (info.st_mode & 077) != 0)
      std::fprintf(stderr, "kcoral-server: the token file %s is readable by other users; make it 0600\n",
                   config.token_file.c_str());
    std::string names;
    for (const std::string& name : tenants.names()) names += (names.empty() ? "" : ", ") + name;
    std::fprintf(stderr,
                 "kcoral-server: %zu tenants (%s), kept apart: each one's blobs, queue, in-flight bytes and "
                 "connections (%zu programs waiting, %llu bytes, %zu connections at most)\n",
                 tenants.size(), names.c_str(), config.max_queued_per_tenant,
                 static_cast<unsigned long long>(tenant_inflight_limit(config, tenants.size())),
                 tenant_connection_limit(config, tenants.size()));
  }
  boost::system::error_code address_error;
  auto listen_address = boost::asio::ip::make_address(config.host, address_error);
  if (!address_error && !listen_address.is_loopback() && !tenants.need_tokens())
    std::fprintf(stderr,
                 "kcoral-server: listening on %s without --token-file: anyone who can reach it can run "
                 "programs here\n",
                 config.host.c_str());
  return tenants;
}

// The event logs of --log-dir: every request's, and with tokens, those that showed none.
struct EventLogs {
  std::unique_ptr<EventLog> requests;
  std::unique_ptr<EventLog> anonymous;
};
Step<EventLogs> open_event_logs(const ServerConfig& config, const Tenants& tenants) {
  EventLogs logs;
  if (config.log_dir.empty()) return logs;
  for (auto [log, name] : {std::pair{&logs.requests, "events.jsonl"}, std::pair{&logs.anonymous, "anonymous.jsonl"}}) {
    if (log == &logs.anonymous && !tenants.need_tokens()) break;
    auto opened = EventLog::open({config.log_dir, config.log_max_bytes, config.log_files, name});
    if (!opened) return refuse(2, "--log-dir: " + opened.error().message);
    *log = std::move(*opened);
  }
  return logs;
}

Step<std::unique_ptr<DiskBlobCache>> open_disk_cache(const ServerConfig& config) {
  if (config.disk_cache_dir.empty()) return nullptr;
  auto opened = DiskBlobCache::open(config.disk_cache_dir, config.disk_cache_bytes, config.disk_cache_max_blobs);
  if (!opened) return refuse(2, "--disk-cache-dir: " + opened.error().message);
  return std::move(*opened);
}

// An execution context whose pending handlers can be destroyed before the context ends
// (asio's shutdown(), which its destructor calls, is protected).
template <class Context>
class ServerContext : public Context {
 public:
  using Context::Context;
  void destroy_pending_handlers() { Context::shutdown(); }
};

// Ends, at every return of run_server once the pool and the state are made, what the
// server's two contexts still hold after their threads have stopped: a kept-alive
// connection's read, a long step not run. Each of those holds a session, whose end updates
// the state (its count of connections, the list of connections without a token). The
// contexts come first (the pool and the state are built on them), so without this their
// own ends would destroy those sessions after the state.
class PendingHandlersEnd {
 public:
  PendingHandlersEnd(ServerContext<boost::asio::io_context>& io, ServerContext<boost::asio::thread_pool>& long_steps)
      : io_(io), long_steps_(long_steps) {}
  PendingHandlersEnd(const PendingHandlersEnd&) = delete;
  PendingHandlersEnd& operator=(const PendingHandlersEnd&) = delete;
  ~PendingHandlersEnd() {
    long_steps_.stop();  // at an early return: a step that runs now ends while the state lives
    long_steps_.join();
    long_steps_.destroy_pending_handlers();  // before the I/O's: a long step may post to it
    io_.stop();
    io_.destroy_pending_handlers();
  }

 private:
  ServerContext<boost::asio::io_context>& io_;
  ServerContext<boost::asio::thread_pool>& long_steps_;
};

// The I/O threads running `io`, until stop() (or destruction).
class IoThreads {
 public:
  IoThreads(boost::asio::io_context& io, std::size_t count) : io_(io), work_(boost::asio::make_work_guard(io)) {
    for (std::size_t i = 0; i < count; ++i) threads_.emplace_back([&io] { io.run(); });
  }
  IoThreads(const IoThreads&) = delete;
  IoThreads& operator=(const IoThreads&) = delete;
  ~IoThreads() { stop(); }
  // Waits for the threads to return, once something stopped `io`.
  void join() {
    for (std::thread& thread : threads_)
      if (thread.joinable()) thread.join();
  }
  void stop() {
    work_.reset();
    io_.stop();
    join();
  }

 private:
  boost::asio::io_context& io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
};

// Listening starts only once the workers can take programs: the worker parent is up and
// the first worker of every group is alive, or one failed, and with it the start.
Step<void> wait_for_workers(const WorkerPool& pool, const ServerConfig& config) {
  if (pool.wait_started(std::chrono::minutes(5))) return {};
  std::string why = pool.startup_error();
  if (why.empty() && !pool.parent_ready())
    why = "the worker parent (" + config.python +
          ", which imports what --preload names) did not say it was ready within 5 minutes";
  else if (why.empty())
    why = "the worker parent is up, but no first worker came up within 5 minutes (it was asked to fork them)";
  return refuse(1, "the workers did not start: " + why);
}

// The HTTP listener and, with --agent-port, the balancer's agent check (which answers from
// then on, through the shutdown too, with 0%). Returns the listener's port.
struct Listening {
  std::shared_ptr<Listener> listener;
  std::shared_ptr<Agent> agent;
  unsigned short port = 0;
};
Step<Listening> start_listening(boost::asio::io_context& io, ServerState& state, const ServerConfig& config) {
  Listening out;
  boost::asio::ip::tcp::endpoint endpoint;
  try {
    endpoint = {boost::asio::ip::make_address(config.host), config.port};
  } catch (const std::exception& e) {
    return refuse(2, "bad --host " + config.host + ": " + e.what());
  }
  out.listener = std::make_shared<Listener>(io, state);
  auto port = out.listener->open(endpoint);
  if (!port) return refuse(1, port.error().message);
  out.port = *port;
  if (config.agent_port) {
    out.agent = std::make_shared<Agent>(io, state);
    auto agent_port = out.agent->open({endpoint.address(), *config.agent_port});
    if (!agent_port) return refuse(1, "--agent-port: " + agent_port.error().message);
    out.agent->run();
    std::printf("kcoral-server agent check on tcp://%s:%u\n", config.host.c_str(), static_cast<unsigned>(*agent_port));
  }
  out.listener->run();
  return out;
}

// The start lines after listening: the sandbox, the compile caches, worker reuse, and
// last the line that says where it listens (on stdout, which tools wait for).
void announce(const ServerConfig& config, const std::string& compile_caches_line, unsigned short port,
              std::size_t capacity) {
  std::fprintf(stderr, "kcoral-server: %s\n", sandbox_summary(config).c_str());
  std::fprintf(stderr, "kcoral-server: %s\n", compile_caches_line.c_str());
  if (config.fork_parents > 1)
    std::fprintf(stderr, "kcoral-server: fresh workers forked by %zu copies of the worker parent side by side "
                         "(--fork-parents)\n", config.fork_parents);
  if (config.programs_per_worker > 1 && config.reuse_check == "state")
    std::fprintf(stderr,
                 "kcoral-server: --programs-per-worker %zu: a worker runs programs of one tenant only, and is "
                 "retired as soon as one leaves its threads, open files, environment, imported modules, "
                 "torch's GPU memory or processes other than they were; files in its scratch and other "
                 "state can still reach that tenant's next program\n",
                 config.programs_per_worker);
  else if (config.programs_per_worker > 1)
    std::fprintf(stderr,
                 "kcoral-server: --programs-per-worker %zu --reuse-check none: programs of one tenant share "
                 "a worker and its sandbox, so one program's files, processes and state can reach the next\n",
                 config.programs_per_worker);
  std::printf("kcoral-server listening on http://%s:%u (%s, %zu workers, sandbox %s)\n", config.host.c_str(),
              static_cast<unsigned>(port), config.device.c_str(), capacity, config.sandbox.c_str());
  std::fflush(stdout);
}

// The graceful stop. A signal: refuse new programs, let running ones go on for the grace,
// then kill them (answered 503); when none runs, let the last responses be written (at
// most a minute), and stop the I/O. A second signal kills running programs at once and
// stops within a second. All of it on one strand.
class Shutdown {
 public:
  Shutdown(boost::asio::io_context& io, ServerState& state, WorkerPool& pool, Listener& listener, double grace_seconds)
      : io_(io), state_(state), pool_(pool), listener_(listener), grace_seconds_(grace_seconds),
        control_(boost::asio::make_strand(io)), signals_(control_, SIGINT, SIGTERM), grace_(control_),
        settle_timer_(control_) {}

  // Waits for SIGINT or SIGTERM.
  void arm() {
    signals_.async_wait([this](boost::system::error_code ec, int signal) {
      if (!ec) on_signal(signal);
    });
  }

 private:
  static Error stopped(const std::string& why) {
    return Error{ErrorKind::busy, "the server is shutting down: the program was stopped " + why};
  }

  void on_signal(int signal) {
    const char* name = signal == SIGINT ? "SIGINT" : "SIGTERM";
    if (state_.stopping.exchange(true)) {
      std::fprintf(stderr, "kcoral-server: %s again: stopping now\n", name);
      grace_.cancel();
      pool_.abort_running(stopped("by a second signal"));
      settle_within(std::chrono::seconds(1));
      return;
    }
    std::fprintf(stderr,
                 "kcoral-server: %s: refusing new programs; running ones may finish within %s (a second signal "
                 "stops at once)\n",
                 name, seconds_text(grace_seconds_).c_str());
    listener_.stop();
    arm();
    grace_.expires_after(seconds_duration(grace_seconds_));
    grace_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      std::fprintf(stderr, "kcoral-server: the shutdown grace is over: killing running programs\n");
      pool_.abort_running(stopped("after the shutdown grace of " + seconds_text(grace_seconds_)));
    });
    pool_.drain([this] {
      boost::asio::post(control_, [this] {
        grace_.cancel();
        settle_within(std::chrono::seconds(60));
      });
    });
  }

  // Stops the I/O once every response is written, or after `limit` at the latest.
  void settle_within(std::chrono::steady_clock::duration limit) {
    settle_deadline_ = std::min(settle_deadline_, std::chrono::steady_clock::now() + limit);
    settle();
  }
  void settle() {
    if (state_.responses_pending.load() == 0 || std::chrono::steady_clock::now() > settle_deadline_) return io_.stop();
    settle_timer_.expires_after(std::chrono::milliseconds(10));
    settle_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) settle();  // a cancelled wait: another call took over
    });
  }

  boost::asio::io_context& io_;
  ServerState& state_;
  WorkerPool& pool_;
  Listener& listener_;
  double grace_seconds_;
  boost::asio::strand<boost::asio::io_context::executor_type> control_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer grace_;
  boost::asio::steady_timer settle_timer_;
  std::chrono::steady_clock::time_point settle_deadline_ = std::chrono::steady_clock::time_point::max();
};

// A failed step of the start, said once; returns its exit code.
int fail_start(const StartFailure& failure) {
  std::fprintf(stderr, "kcoral-server: %s\n", failure.message.c_str());
  return failure.exit_code;
}

}  // namespace

int run_server(ServerConfig config) {
  ::signal(SIGPIPE, SIG_IGN);
  fill_in_defaults(config);
  auto shape = shape_pool(config);
  if (!shape) return fail_start(shape.error());
  WorkerPool::Config& pool_config = shape->pool;
  auto descriptor_limit = fit_descriptors_and_users(config, pool_config);
  if (!descriptor_limit) return fail_start(descriptor_limit.error());
  auto tenants = load_tenants(config);
  if (!tenants) return fail_start(tenants.error());
  pool_config.tenants = tenants->size();
  auto logs = open_event_logs(config, *tenants);
  if (!logs) return fail_start(logs.error());
  auto disk_cache = open_disk_cache(config);
  if (!disk_cache) return fail_start(disk_cache.error());

  ServerContext<boost::asio::io_context> io(static_cast<int>(config.io_threads));
  BlobStore blobs({config.blob_cache_bytes, config.blob_cache_max_blobs, config.blob_cache_max_files},
                  disk_cache->get());
  Metrics metrics(tenants->size());
  pool_config.tenant_queue_full = [&metrics] { metrics.record(Metrics::Guard::tenant_queue_full); };
  // Each failed start is said (once the server listens: before, the first failure ends
  // the start with its message) and logged; so is the state in which none can start.
  std::atomic<bool> listening{false};
  pool_config.start_failed = [&listening, event_log = logs->requests.get()](const WorkerSupply::StartEnd& end,
                                                                            std::size_t failures_in_row) {
    // Its GPU's UUID, or a set group's UUIDs joined by commas; empty on a CPU server.
    const std::string& of_gpu = end.visible_devices;
    const char* of = of_gpu.empty() ? "" : of_gpu.find(',') == std::string::npos ? " of GPU " : " of GPUs ";
    if (listening)
      std::fprintf(stderr, "kcoral-server: a worker%s%s failed to start (%zu in a row): %.2000s\n", of,
                   of_gpu.c_str(), failures_in_row, end.failure->c_str());
    record_start_failure(event_log, {of_gpu, static_cast<long>(end.pid), *end.failure, end.timed_out, failures_in_row});
  };
  pool_config.failing_changed = [&listening](bool failing, const std::string& why) {
    if (!listening) return;
    if (failing)
      std::fprintf(stderr, "kcoral-server: %.2000s; programs are answered with this (engine) until a worker starts\n",
                   why.c_str());
    else
      std::fprintf(stderr, "kcoral-server: a worker started again; programs run\n");
  };
  auto [compile_caches, compile_caches_line] = open_compile_caches(config);
  pool_config.compile_caches = compile_caches.get();
  // The steps that grow with what a client or a worker sent (execute_job.hpp,
  // kLongStepBytes), never on the I/O threads or the pool's strand. One a core, 2 to 4:
  // as many as the in-flight limit lets the largest bodies in at once by default.
  ServerContext<boost::asio::thread_pool> long_steps(
      std::clamp(std::thread::hardware_concurrency(), 2u, 4u));
  pool_config.long_steps = &long_steps;
  WorkerPool pool(io, pool_config);
  ServerState state{config, blobs, pool, metrics, new_request_id(), now_rfc3339(),
                    config.device == "gpu" ? pool_config.groups.size() : 0, shape->target_arch,
                    std::move(*tenants)};
  state.descriptor_limit = *descriptor_limit;
  state.execute.server_gpus = state.gpu_count;
  state.execute.max_gpus_per_program = state.gpu_count == 0 ? 0 : pool_config.max_gpus_per_program;
  state.event_log = logs->requests.get();
  state.anonymous_log = logs->anonymous.get();
  state.long_steps = &long_steps;

  PendingHandlersEnd pending_handlers_end(io, long_steps);  // ends before the state, after the threads
  if (auto started = pool.start(); !started) return fail_start({1, started.error().message});
  IoThreads threads(io, config.io_threads);
  auto workers_up = wait_for_workers(pool, config);
  auto serving = workers_up ? start_listening(io, state, config) : Step<Listening>(std::unexpected(workers_up.error()));
  if (!serving) {
    pool.drain([] {});
    threads.stop();
    return fail_start(serving.error());
  }
  announce(config, compile_caches_line, serving->port, pool.load().capacity);
  listening = true;

  Shutdown shutdown(io, state, pool, *serving->listener, config.shutdown_grace_seconds);
  shutdown.arm();
  threads.join();
  long_steps.stop();  // what runs there now ends while the server's state lives
  long_steps.join();
  std::fprintf(stderr, "kcoral-server: stopped\n");
  return 0;
}

}  // namespace kcoral
