// run_server: start workers, then listen; on a signal, refuse new work, finish what runs.
#include "server.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
  out.reuse_check = config.reuse_check == "state";
  out.cuda_connections = config.cuda_connections;
  out.sandboxed = config.sandbox == "namespaces";
  out.memory_limit_bytes = config.memory_limit_bytes;
  out.file_size_limit_bytes = config.file_size_limit_bytes;
  out.process_limit = config.process_limit;
  out.open_files_limit = config.open_files_limit;
  out.scratch_bytes = config.scratch_bytes;
  out.compile_cache_bytes = config.compile_cache_bytes;
  out.first_uid = config.sandbox_first_uid;
  out.last_uid = config.sandbox_last_uid;
  out.readable_paths = config.readable_paths;
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
      << (config.scratch_bytes >> 20) << " MiB private scratch, seccomp, memory "
      << (config.memory_limit_bytes >> 20) << " MiB, files " << (config.file_size_limit_bytes >> 20)
      << " MiB, " << config.process_limit << " processes, " << config.open_files_limit
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

}  // namespace

int run_server(ServerConfig config) {
  ::signal(SIGPIPE, SIG_IGN);
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (config.num_workers == 0) config.num_workers = cores;
  if (config.io_threads == 0) config.io_threads = std::clamp(cores, 2u, 8u);
  if (config.work_root.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    config.work_root = std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/kcoral-" + std::to_string(::getpid());
  }
  config.python = worker_python(config.python);

  WorkerPool::Config pool_config;
  pool_config.queue_timeout_seconds = config.queue_timeout_seconds;
  pool_config.programs_per_worker = config.programs_per_worker;
  // CPU workers make no context: no more of them are prepared than run at once.
  pool_config.context_inits_at_once = config.device == "gpu" ? config.context_inits_at_once : 1;
  pool_config.zygote = {config.python, worker_options(config)};
  pool_config.workers_per_group = config.num_workers;
  // A result's frame holds its returned values' JSON and both captured streams.
  pool_config.max_message_bytes = config.max_response_bytes + 2 * config.max_output_limit_bytes + (1u << 20);
  std::string target_arch;
  if (config.device == "gpu") {
    auto gpus = list_gpus();
    if (!gpus) {
      std::fprintf(stderr, "kcoral-server: --device gpu: %s\n", gpus.error().message.c_str());
      return 1;
    }
    pool_config.groups.clear();
    for (int index : config.gpus) {
      auto gpu = std::find_if(gpus->begin(), gpus->end(), [&](const GpuInfo& g) { return g.index == index; });
      if (gpu == gpus->end()) {
        std::fprintf(stderr, "kcoral-server: there is no GPU %d (this machine has %zu)\n", index, gpus->size());
        return 2;
      }
      pool_config.groups.push_back(gpu->uuid);
      if (target_arch.empty()) target_arch = gpu->arch();
      std::fprintf(stderr, "kcoral-server: GPU %d: %s, %s (%s)\n", index, gpu->name.c_str(), gpu->uuid.c_str(),
                   gpu->arch().c_str());
    }
    pool_config.workers_per_group = config.workers_per_gpu;
  }

  // Descriptors: what the connections, the cache and the workers may hold must fit.
  std::uint64_t descriptor_limit = raise_descriptor_limit();
  std::size_t workers = pool_config.groups.size() * (pool_config.workers_per_group + pool_config.context_inits_at_once);
  DescriptorPlan plan =
      plan_descriptors(descriptor_limit, config.max_connections, config.blob_cache_max_files, workers);
  if (plan.max_connections == 0) {
    std::fprintf(stderr, "kcoral-server: the descriptor limit of %llu is too low for %zu workers; raise it (ulimit -n)\n",
                 static_cast<unsigned long long>(descriptor_limit), workers);
    return 1;
  }
  if (!plan.adjusted.empty()) std::fprintf(stderr, "kcoral-server: %s\n", plan.adjusted.c_str());
  // Every live worker holds a user id of the range until its namespace is gone: the
  // prepared ones, the running ones, and those on their way out.
  std::uint64_t uids = std::uint64_t{config.sandbox_last_uid} - config.sandbox_first_uid + 1;
  if (config.sandbox == "namespaces" && uids < 4 * workers) {
    std::fprintf(stderr, "kcoral-server: --sandbox-uid-range holds %llu ids, fewer than the %zu that %zu workers need\n",
                 static_cast<unsigned long long>(uids), 4 * workers, workers);
    return 2;
  }
  config.max_connections = plan.max_connections;
  config.blob_cache_max_files = plan.blob_cache_files;

  Tenants tenants;
  if (!config.token_file.empty()) {
    auto read = Tenants::read_token_file(config.token_file);
    if (!read) {
      std::fprintf(stderr, "kcoral-server: --token-file: %s\n", read.error().message.c_str());
      return 2;
    }
    tenants = std::move(*read);
    struct stat info {};
    if (::stat(config.token_file.c_str(), &info) == 0 && (info.st_mode & 077) != 0)
      std::fprintf(stderr, "kcoral-server: the token file %s is readable by other users; make it 0600\n",
                   config.token_file.c_str());
    std::string names;
    for (const std::string& name : tenants.names()) names += (names.empty() ? "" : ", ") + name;
    std::fprintf(stderr,
                 "kcoral-server: %zu tenants (%s), kept apart: each one's blobs, queue and in-flight bytes "
                 "(%zu programs waiting, %llu bytes at most)\n",
                 tenants.size(), names.c_str(), config.max_queued_per_tenant,
                 static_cast<unsigned long long>(tenant_inflight_limit(config, tenants.size())));
  }
  pool_config.tenants = tenants.size();
  pool_config.max_queued_per_tenant = config.max_queued_per_tenant;
  boost::asio::ip::address listen_address;
  boost::system::error_code address_error;
  listen_address = boost::asio::ip::make_address(config.host, address_error);
  if (!address_error && !listen_address.is_loopback() && !tenants.need_tokens())
    std::fprintf(stderr,
                 "kcoral-server: listening on %s without --token-file: anyone who can reach it can run "
                 "programs here\n",
                 config.host.c_str());

  std::unique_ptr<EventLog> event_log;
  std::unique_ptr<EventLog> anonymous_log;  // with tokens: the requests that show none
  if (!config.log_dir.empty()) {
    auto open_log = [&config](const char* name) -> std::unique_ptr<EventLog> {
      auto opened = EventLog::open({config.log_dir, config.log_max_bytes, config.log_files, name});
      if (!opened) {
        std::fprintf(stderr, "kcoral-server: --log-dir: %s\n", opened.error().message.c_str());
        return nullptr;
      }
      return std::move(*opened);
    };
    if (!(event_log = open_log("events.jsonl"))) return 2;
    if (tenants.need_tokens() && !(anonymous_log = open_log("anonymous.jsonl"))) return 2;
  }

  boost::asio::io_context io(static_cast<int>(config.io_threads));
  std::unique_ptr<DiskBlobCache> disk_cache;
  if (!config.disk_cache_dir.empty()) {
    auto opened = DiskBlobCache::open(config.disk_cache_dir, config.disk_cache_bytes);
    if (!opened) {
      std::fprintf(stderr, "kcoral-server: --disk-cache-dir: %s\n", opened.error().message.c_str());
      return 2;
    }
    disk_cache = std::move(*opened);
  }
  BlobStore blobs({config.blob_cache_bytes, config.blob_cache_max_blobs, config.blob_cache_max_files},
                  disk_cache.get());
  Metrics metrics(tenants.size());
  pool_config.tenant_queue_full = [&metrics] { metrics.record(Metrics::Guard::tenant_queue_full); };
  // Each failed start is said (once the server listens: before, the first failure ends
  // the start with its message) and logged; so is the state in which none can start.
  std::atomic<bool> listening{false};
  pool_config.start_failed = [&listening, &event_log, groups = pool_config.groups, gpu = config.device == "gpu"](
                                 const WorkerSupply::StartEnd& end, std::size_t failures_in_row) {
    std::string of_gpu = gpu && end.group < groups.size() ? groups[end.group] : std::string();
    if (listening)
      std::fprintf(stderr, "kcoral-server: a worker%s%s failed to start (%zu in a row): %.2000s\n",
                   of_gpu.empty() ? "" : " of GPU ", of_gpu.c_str(), failures_in_row, end.failure->c_str());
    record_start_failure(event_log.get(), {of_gpu, static_cast<long>(end.pid), *end.failure, end.timed_out,
                                           failures_in_row});
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
  WorkerPool pool(io, pool_config);
  ServerState state{config, blobs, pool, metrics, new_request_id(), now_rfc3339(),
                    config.device == "gpu" ? pool_config.groups.size() : 0, target_arch, std::move(tenants)};
  state.descriptor_limit = descriptor_limit;
  state.event_log = event_log.get();
  state.anonymous_log = anonymous_log.get();

  if (auto started = pool.start(); !started) {
    std::fprintf(stderr, "kcoral-server: %s\n", started.error().message.c_str());
    return 1;
  }
  auto work = boost::asio::make_work_guard(io);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < config.io_threads; ++i) threads.emplace_back([&io] { io.run(); });
  auto stop_threads = [&] {
    work.reset();
    io.stop();
    for (std::thread& thread : threads) thread.join();
  };

  // Listen only once the workers can take programs: the worker parent is up and the first
  // worker of every group is alive (or one failed, and with it the start).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (!pool.ready() && pool.startup_error().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!pool.ready()) {
    std::string why = pool.startup_error();
    if (why.empty() && !pool.parent_ready())
      why = "the worker parent (" + config.python +
            ", which imports what --preload names) did not say it was ready "
            "within 5 minutes";
    else if (why.empty())
      why = "the worker parent is up, but no first worker came up within 5 minutes (it was asked to fork them)";
    std::fprintf(stderr, "kcoral-server: the workers did not start: %s\n", why.c_str());
    pool.drain([] {});
    stop_threads();
    return 1;
  }

  auto listener = std::make_shared<Listener>(io, state);
  boost::asio::ip::tcp::endpoint endpoint;
  try {
    endpoint = {boost::asio::ip::make_address(config.host), config.port};
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kcoral-server: bad --host %s: %s\n", config.host.c_str(), e.what());
    stop_threads();
    return 2;
  }
  auto port = listener->open(endpoint);
  if (!port) {
    std::fprintf(stderr, "kcoral-server: %s\n", port.error().message.c_str());
    pool.drain([] {});
    stop_threads();
    return 1;
  }
  // The balancer's agent check answers from here on, through the shutdown too (with 0%).
  std::shared_ptr<Agent> agent;
  if (config.agent_port) {
    agent = std::make_shared<Agent>(io, state);
    auto agent_port = agent->open({endpoint.address(), *config.agent_port});
    if (!agent_port) {
      std::fprintf(stderr, "kcoral-server: --agent-port: %s\n", agent_port.error().message.c_str());
      pool.drain([] {});
      stop_threads();
      return 1;
    }
    agent->run();
    std::printf("kcoral-server agent check on tcp://%s:%u\n", config.host.c_str(), static_cast<unsigned>(*agent_port));
  }
  listener->run();
  std::fprintf(stderr, "kcoral-server: %s\n", sandbox_summary(config).c_str());
  std::fprintf(stderr, "kcoral-server: %s\n", compile_caches_line.c_str());
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
              static_cast<unsigned>(*port), config.device.c_str(), pool.load().capacity, config.sandbox.c_str());
  std::fflush(stdout);
  listening = true;

  // A signal: refuse new programs, let running ones go on for the grace, then kill them
  // (answered 503); when none runs, let the last responses be written, and stop. A second
  // signal kills running programs at once and stops within a second.
  // All of it on one strand.
  auto control = boost::asio::make_strand(io);
  boost::asio::signal_set signals(control, SIGINT, SIGTERM);
  boost::asio::steady_timer grace(control);
  boost::asio::steady_timer settle(control);
  auto settle_deadline = std::chrono::steady_clock::now() + std::chrono::hours(24);
  std::function<void()> wait_for_responses = [&] {
    if (state.responses_pending.load() == 0 || std::chrono::steady_clock::now() > settle_deadline)
      return io.stop();
    settle.expires_after(std::chrono::milliseconds(10));
    settle.async_wait([&](boost::system::error_code ec) {
      if (!ec) wait_for_responses();  // a cancelled wait: another call took over
    });
  };
  auto stopped_programs = [](const std::string& why) {
    return Error{ErrorKind::busy, "the server is shutting down: the program was stopped " + why};
  };
  std::function<void(boost::system::error_code, int)> on_signal = [&](boost::system::error_code ec, int signal) {
    if (ec) return;
    const char* name = signal == SIGINT ? "SIGINT" : "SIGTERM";
    if (state.stopping.exchange(true)) {
      std::fprintf(stderr, "kcoral-server: %s again: stopping now\n", name);
      grace.cancel();
      pool.abort_running(stopped_programs("by a second signal"));
      settle_deadline = std::min(settle_deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1));
      wait_for_responses();
      return;
    }
    std::fprintf(stderr,
                 "kcoral-server: %s: refusing new programs; running ones may finish within %s (a second signal "
                 "stops at once)\n",
                 name, seconds_text(config.shutdown_grace_seconds).c_str());
    listener->stop();
    signals.async_wait(on_signal);
    grace.expires_after(seconds_duration(config.shutdown_grace_seconds));
    grace.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      std::fprintf(stderr, "kcoral-server: the shutdown grace is over: killing running programs\n");
      pool.abort_running(stopped_programs("after the shutdown grace of " + seconds_text(config.shutdown_grace_seconds)));
    });
    pool.drain([&] {
      boost::asio::post(control, [&] {
        grace.cancel();
        settle_deadline = std::min(settle_deadline, std::chrono::steady_clock::now() + std::chrono::seconds(60));
        wait_for_responses();
      });
    });
  };
  signals.async_wait(on_signal);
  for (std::thread& thread : threads) thread.join();
  std::fprintf(stderr, "kcoral-server: stopped\n");
  return 0;
}

}  // namespace kcoral
