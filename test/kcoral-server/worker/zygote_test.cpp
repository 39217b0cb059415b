// Zygote (kcoral-server/worker/zygote.cpp), the worker parent, set up as worker_parent.cpp
// sets it up: in a child of the test (single-threaded, as the zygote is when it forks), a
// subreaper with SIGCHLD and the stop signals blocked and read from a signalfd, with the
// real executor and a real sandbox (off, or the namespaces where this machine allows
// them), while the test plays the front on the other end of its control channel. Checked:
// it says ready with the interpreter's versions; a fork request gives the front a worker,
// held by a pidfd of that very process and reached through the channel that comes with it,
// which says ready in a session of its own and a directory of its own under the work root;
// the worker runs a program end to end; a worker's exit is reported with its code, or with
// the signal that killed it, and its directory is removed; what a dead worker left running
// is killed, the live workers spared, and the zygote goes on forking; a worker it cannot
// fork (no descriptor left for its channel) is reported with the reason, and it serves on;
// the front closing the control channel, or a stop signal, makes it kill every worker and
// what they left running, remove their files and return 0; failed_to_start sends the
// reason; trial() passes where workers can start and fails with the sandbox's own reason
// where they cannot; a sandboxed worker runs its program in a PID namespace of its own as
// the sandbox's user, and one whose sandbox cannot be made says why before its exit is
// reported. Tests that make namespaces are skipped, saying why, where the machine does not
// allow them.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fork_scope.hpp"
#include "interpreter.hpp"
#include "kcoral-server/worker/sandbox_support.hpp"
#include "libkcoral/executor_support.hpp"
#include "libkcoral/temp_dir.hpp"
#include "messages.hpp"
#include "front_stand_in.hpp"
#include "process.hpp"
#include "process_tree.hpp"
#include "zygote.hpp"

namespace messages = kcoral::messages;
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

using Front = kcoral::test::FrontStandIn;
using kcoral::test::kWaitMs;

// The pid that the pidfd `fd` names (/proc/self/fdinfo); -1 for a process already reaped,
// or when `fd` is not a pidfd.
pid_t pid_of_pidfd(int fd) {
  std::ifstream info("/proc/self/fdinfo/" + std::to_string(fd));
  for (std::string line; std::getline(info, line);)
    if (line.starts_with("Pid:")) return static_cast<pid_t>(std::stol(line.substr(4)));
  return -1;
}

// Whether the process held by `pidfd` exits within `timeout_ms` (its pidfd turns readable).
bool ends_within(int pidfd, int timeout_ms = kWaitMs) {
  pollfd exited{pidfd, POLLIN, 0};
  return ::poll(&exited, 1, timeout_ms) == 1;
}

// Holds `pid`, a process that is not our child, by a pidfd; an empty Process when it is gone.
kcoral::Process hold(pid_t pid) {
  kcoral::UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) return {};
  auto held = kcoral::Process::adopt(pid, std::move(pidfd));
  return held ? std::move(*held) : kcoral::Process();
}

// A worker as the front has it from a `forked` message: its pid, a pidfd and its channel.
struct Worker {
  pid_t pid = -1;
  kcoral::Process process;
  Front front;
  pid_t pidfd_names = -1;  // the pid the pidfd that came names
};

// Asks `zygote` for a worker and takes what comes back; nullopt when no `forked` came with
// its two descriptors.
std::optional<Worker> fork_worker(Front& zygote, messages::Fork fork = messages::Fork{""}) {
  if (!zygote.send(fork)) return std::nullopt;
  std::vector<kcoral::UniqueFd> fds;
  auto forked = zygote.expect<messages::Forked>(&fds);
  if (!forked || fds.size() != 2) return std::nullopt;
  Worker worker;
  worker.pid = static_cast<pid_t>(forked->pid);
  worker.pidfd_names = pid_of_pidfd(fds[1].get());
  worker.front.channel = kcoral::Channel(std::move(fds[0]));
  auto held = kcoral::Process::adopt(worker.pid, std::move(fds[1]));
  if (held) worker.process = std::move(*held);
  return worker;
}

// A sandbox that is on, as the zygote makes it when the server starts with --sandbox
// namespaces: its new roots built under the work root, without control groups (the host
// may not allow them; program_cgroups_test covers them).
kcoral::SandboxConfig real_sandbox(const kcoral::test::TempDir& work_root) {
  kcoral::SandboxConfig config;
  config.enabled = true;
  config.cgroups = false;
  config.root_mountpoint = work_root / "sandbox-root";
  config.init_path = KCORAL_INIT_PATH;
  config.policy.scratch_bytes = 64 << 20;
  return config;
}

kcoral::SandboxConfig no_sandbox() {
  kcoral::SandboxConfig config;
  config.enabled = false;
  return config;
}

// The zygote, run in a child of the test as run_worker_parent runs it (but for the
// preload, which the executor tests cover, and the readable paths of LD_LIBRARY_PATH); its
// executor is the test process's, made before the fork. `front` is the test's end of its
// control channel. With `trial`, it tries a worker first and, when that fails, says so
// instead of serving; `before_serve` runs in it last before it serves; `fork_parents` above 1
// gives it that many helpers. The destructor kills it if it is still running (its workers
// die with it).
class ZygoteProcess {
 public:
  ZygoteProcess(const kcoral::test::TempDir& work_root, kcoral::SandboxConfig config, bool trial = false,
                const std::function<void()>& before_serve = {}, std::size_t fork_parents = 1) {
    kcoral::Executor& executor = kcoral::test::executor();  // the interpreter, up before the fork
    versions_ = executor.versions();
    auto pair = kcoral::Channel::socket_pair();
    REQUIRE(pair.has_value());
    std::fflush(nullptr);
    pid_t pid = -1;
    {
      kcoral::cpython::ForkScope fork;
      pid = ::fork();
      if (pid == 0) {
        fork.in_child();
        pair->first.reset();  // the front's end: only the front may hold it
        run(executor, kcoral::Channel(std::move(pair->second)), work_root.path(), std::move(config), trial, versions_,
            before_serve, fork_parents);
      }
      fork.in_parent();
    }
    REQUIRE(pid > 0);
    front.channel = kcoral::Channel(std::move(pair->first));
    auto held = kcoral::Process::open(pid);
    REQUIRE(held.has_value());
    process_ = std::move(*held);
  }
  ZygoteProcess(const ZygoteProcess&) = delete;
  ZygoteProcess& operator=(const ZygoteProcess&) = delete;
  ~ZygoteProcess() {
    if (!process_.reap()) {
      process_.signal(SIGKILL);
      (void)process_.wait_for_exit(std::chrono::milliseconds(kWaitMs));
    }
  }

  // What the zygote is given to announce: the executor's versions.
  [[nodiscard]] const std::map<std::string, std::string>& versions() const { return versions_; }
  [[nodiscard]] pid_t pid() const { return process_.pid(); }
  bool signal(int number) const { return process_.signal(number); }
  // Its exit code, once it has ended by itself within kWaitMs; -1 when it did not (it is
  // killed then), or when a signal ended it.
  int exit_code() {
    if (!ends_within(process_.pidfd())) {
      process_.signal(SIGKILL);
      (void)process_.wait_for_exit(std::chrono::milliseconds(kWaitMs));
      return -1;
    }
    auto status = process_.reap();
    return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  }

  Front front;

 private:
  // The child: worker_parent.cpp's steps, in its order. Never returns.
  [[noreturn]] static void run(kcoral::Executor& executor, kcoral::Channel control, const std::string& work_root,
                               kcoral::SandboxConfig config, bool trial, std::map<std::string, std::string> versions,
                               const std::function<void()>& before_serve, std::size_t fork_parents) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
    kcoral::become_subreaper();
    kcoral::ZygoteOptions options{kcoral::WorkerOptions{}, {}, {}};
    options.flags.work_root = work_root;
    options.flags.sandboxed = config.enabled;
    options.flags.init_path = config.init_path;
    options.flags.fork_parents = fork_parents;
    options.interpreter_bin = fs::path(kcoral::cpython::interpreter_executable()).parent_path().string();
    kcoral::Sandbox sandbox(std::move(config));
    auto prepared = sandbox.prepare_zygote();
    executor.freeze_objects();
    sandbox.add_readable_paths(kcoral::cpython::interpreter_paths());
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    ::sigprocmask(SIG_BLOCK, &mask, nullptr);
    int signal_fd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    kcoral::Zygote zygote(std::move(options), executor, sandbox, std::move(control));
    if (!prepared) ::_exit(zygote.failed_to_start(prepared.error().message));
    if (trial)
      if (auto tried = zygote.trial(); !tried) ::_exit(zygote.failed_to_start(tried.error().message));
    if (auto started = zygote.start_helpers(signal_fd); !started) ::_exit(zygote.failed_to_start(started.error().message));
    if (before_serve) before_serve();
    ::_exit(zygote.serve(signal_fd, std::move(versions)));
  }

  std::map<std::string, std::string> versions_;
  kcoral::Process process_;
};

kcoral::BuiltProgram build(const kcoral::ProgramBuilder& builder) {
  auto built = builder.build();
  REQUIRE_MESSAGE(built.has_value(), built.error().message);
  return std::move(*built);
}

// A program calling `main` of `source` and returning its value as "out".
kcoral::BuiltProgram calling(const std::string& source) { return build(kcoral::test::call(source)); }

// A program that starts `sleep 600`, writes its pid to `pid_file` (whole, by a rename), and
// then sleeps itself, until the worker is killed.
kcoral::BuiltProgram leaving_a_process(const std::string& pid_file) {
  return calling("import os, subprocess, time\n"
                 "def main():\n"
                 "    left = subprocess.Popen(['sleep', '600'])\n"
                 "    with open('" + pid_file + ".part', 'w') as f:\n"
                 "        f.write(str(left.pid))\n"
                 "    os.rename('" + pid_file + ".part', '" + pid_file + "')\n"
                 "    time.sleep(600)\n");
}

// The process whose pid a program wrote to `pid_file`, held from the moment the file
// appears (waited for at most kWaitMs), and killed when the test is done with it, should
// the zygote have let it live; empty when no pid came.
class LeftProcess {
 public:
  explicit LeftProcess(const std::string& pid_file) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
    while (!fs::exists(pid_file) && std::chrono::steady_clock::now() < deadline) ::poll(nullptr, 0, 10);
    std::ifstream in(pid_file);
    pid_t pid = -1;
    if (in >> pid) process_ = hold(pid);
  }
  LeftProcess(const LeftProcess&) = delete;
  LeftProcess& operator=(const LeftProcess&) = delete;
  ~LeftProcess() { process_.signal(SIGKILL); }

  [[nodiscard]] bool held() const { return static_cast<bool>(process_); }
  [[nodiscard]] bool ends_within_wait() const { return ends_within(process_.pidfd()); }

 private:
  kcoral::Process process_;
};

// Whether the worker root of `pid` exists under `work_root`.
bool has_root(const kcoral::test::TempDir& work_root, pid_t pid) { return fs::exists(work_root / std::to_string(pid)); }

}  // namespace

TEST_SUITE("zygote") {

TEST_CASE("the zygote says ready with the interpreter's versions, and returns 0 when the front closes its channel") {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox());
  auto ready = zygote.front.expect<messages::ZygoteReady>();
  CAPTURE(zygote.front.heard);
  REQUIRE(ready.has_value());
  CHECK(ready->versions == zygote.versions());
  CHECK(ready->versions.contains("python"));
  zygote.front.channel = kcoral::Channel();
  CHECK(zygote.exit_code() == 0);
}

TEST_CASE("a forked worker comes held by a pidfd of itself, with its channel, and says ready in its own session and "
          "directory") {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox());
  REQUIRE(zygote.front.expect<messages::ZygoteReady>());
  auto worker = fork_worker(zygote.front);
  CAPTURE(zygote.front.heard);
  REQUIRE(worker.has_value());
  CHECK(worker->pid > 0);
  CHECK(worker->pidfd_names == worker->pid);
  CHECK(static_cast<bool>(worker->process));
  CHECK(worker->front.expect<messages::Ready>().has_value());
  CAPTURE(worker->front.heard);
  CHECK(kcoral::parent_of(worker->pid) == zygote.pid());
  CHECK(::getsid(worker->pid) == worker->pid);  // the front kills its whole group on a timeout
  CHECK(has_root(work_root, worker->pid));
}

TEST_CASE("a worker runs a program end to end, its exit is reported with its code, its directory removed, and the "
          "zygote forks on") {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox());
  REQUIRE(zygote.front.expect<messages::ZygoteReady>());
  auto worker = fork_worker(zygote.front);
  CAPTURE(zygote.front.heard);
  REQUIRE(worker.has_value());
  auto built = calling("import os\ndef main():\n    return [os.getpid(), os.environ['HOME'], os.getcwd()]\n");
  REQUIRE(worker->front.expect<messages::Ready>());
  REQUIRE(worker->front.send_job(built));
  auto result = worker->front.result();
  CAPTURE(worker->front.heard);
  REQUIRE(result.has_value());
  REQUIRE_FALSE(result->error.has_value());
  Json out = Json::parse(result->results)["out"]["value"];
  std::string root = work_root / std::to_string(worker->pid);
  CHECK(out[0]["value"] == worker->pid);
  CHECK(out[1]["value"] == root);  // HOME is its directory
  CHECK(out[2]["value"].get<std::string>().starts_with(root + "/"));

  // One program per worker: it exits 0 after the result.
  auto exited = zygote.front.expect<messages::Exited>();
  REQUIRE(exited.has_value());
  CHECK(exited->pid == worker->pid);
  CHECK(exited->exit_code == 0);
  CHECK_FALSE(exited->signal.has_value());
  CHECK_FALSE(exited->out_of_memory.has_value());
  CHECK_FALSE(has_root(work_root, worker->pid));  // removed before the exit is reported
  CHECK(worker->process.exited());

  // Its SIGCHLD did not stop the zygote: it forks the next worker.
  auto next = fork_worker(zygote.front);
  REQUIRE(next.has_value());
  CHECK(next->front.expect<messages::Ready>().has_value());
}

TEST_CASE("a worker forked without the warm-up runs the front's program as its first program; with it, as its second") {
  // The executor numbers the programs a process runs in their uploads' module names
  // (kcoral_upload_<n>_...); both workers start from the zygote's count.
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox());
  REQUIRE(zygote.front.expect<messages::ZygoteReady>());
  auto built = calling("def main():\n    return int(__name__.split('_')[2])\n");
  std::vector<std::int64_t> numbers;
  for (bool warm_up : {false, true}) {
    CAPTURE(warm_up);
    auto worker = fork_worker(zygote.front, messages::Fork{"", 0, false, warm_up});
    REQUIRE(worker.has_value());
    REQUIRE(worker->front.expect<messages::Ready>());
    REQUIRE(worker->front.send_job(built));
    auto result = worker->front.result();
    REQUIRE(result.has_value());
    REQUIRE_FALSE(result->error.has_value());
    numbers.push_back(Json::parse(result->results)["out"]["value"].get<std::int64_t>());
    REQUIRE(zygote.front.expect<messages::Exited>());
  }
  CHECK(numbers[1] == numbers[0] + 1);  // the warm-up was the other's first
}

TEST_CASE("a worker killed by a signal is reported with it; what it left running is killed, the live workers spared") {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox());
  REQUIRE(zygote.front.expect<messages::ZygoteReady>());
  auto spared = fork_worker(zygote.front);
  auto killed = fork_worker(zygote.front);
  CAPTURE(zygote.front.heard);
  REQUIRE(spared.has_value());
  REQUIRE(killed.has_value());
  REQUIRE(spared->front.expect<messages::Ready>());
  REQUIRE(killed->front.expect<messages::Ready>());
  std::string pid_file = work_root / "left.pid";
  REQUIRE(killed->front.send_job(leaving_a_process(pid_file)));
  LeftProcess left(pid_file);
  CAPTURE(killed->front.heard);
  REQUIRE(left.held());
  REQUIRE(killed->process.signal(SIGKILL));  // as the front kills a worker, not its group

  auto exited = zygote.front.expect<messages::Exited>();
  REQUIRE(exited.has_value());
  CHECK(exited->pid == killed->pid);
  CHECK(exited->signal == SIGKILL);
  CHECK_FALSE(exited->exit_code.has_value());
  CHECK_FALSE(has_root(work_root, killed->pid));
  CHECK(left.ends_within_wait());

  // The other worker lives on and runs a program.
  CHECK_FALSE(spared->process.exited());
  REQUIRE(spared->front.send_job(calling("def main():\n    return 7\n")));
  auto result = spared->front.result();
  CAPTURE(spared->front.heard);
  REQUIRE(result.has_value());
  CHECK(Json::parse(result->results)["out"]["value"] == 7);
}

TEST_CASE("the front closing the control channel makes the zygote kill every worker and what they left running, "
          "remove their files and return 0") {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox());
  REQUIRE(zygote.front.expect<messages::ZygoteReady>());
  auto idle = fork_worker(zygote.front);
  auto busy = fork_worker(zygote.front);
  CAPTURE(zygote.front.heard);
  REQUIRE(idle.has_value());
  REQUIRE(busy.has_value());
  REQUIRE(idle->front.expect<messages::Ready>());
  REQUIRE(busy->front.expect<messages::Ready>());
  std::string pid_file = work_root / "left.pid";
  REQUIRE(busy->front.send_job(leaving_a_process(pid_file)));
  LeftProcess left(pid_file);
  REQUIRE(left.held());

  zygote.front.channel = kcoral::Channel();
  CHECK(zygote.exit_code() == 0);
  CHECK(ends_within(idle->process.pidfd()));
  CHECK(ends_within(busy->process.pidfd()));
  CHECK(left.ends_within_wait());
  CHECK_FALSE(has_root(work_root, idle->pid));
  CHECK_FALSE(has_root(work_root, busy->pid));
}

TEST_CASE("a stop signal on the signal descriptor makes the zygote kill its workers, remove their files and return 0") {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox());
  REQUIRE(zygote.front.expect<messages::ZygoteReady>());
  auto worker = fork_worker(zygote.front);
  CAPTURE(zygote.front.heard);
  REQUIRE(worker.has_value());
  REQUIRE(worker->front.expect<messages::Ready>());
  REQUIRE(has_root(work_root, worker->pid));
  REQUIRE(zygote.signal(SIGTERM));
  CHECK(zygote.exit_code() == 0);  // while the front still holds the channel
  CHECK(ends_within(worker->process.pidfd()));
  CHECK_FALSE(has_root(work_root, worker->pid));
}

TEST_CASE("a worker the zygote cannot fork is reported to the front as a failed fork, and the zygote serves on") {
  kcoral::test::TempDir work_root;
  // The zygote's descriptor table full as it starts to serve: its limit at the highest
  // descriptor it holds, and the free numbers below it taken.
  ZygoteProcess zygote(work_root, no_sandbox(), /*trial=*/false, [] {
    int highest = 0;
    for (const auto& entry : fs::directory_iterator("/proc/self/fd"))
      highest = std::max(highest, std::stoi(entry.path().filename().string()));
    rlimit limit{static_cast<rlim_t>(highest) + 1, static_cast<rlim_t>(highest) + 1};
    ::setrlimit(RLIMIT_NOFILE, &limit);
    while (::open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0) {
    }
  });
  REQUIRE(zygote.front.expect<messages::ZygoteReady>());
  REQUIRE(zygote.front.send(messages::Fork{""}));
  auto failed = zygote.front.expect<messages::ForkFailed>();
  CAPTURE(zygote.front.heard);
  REQUIRE(failed.has_value());
  CHECK(failed->message.starts_with("socketpair: "));
  zygote.front.channel = kcoral::Channel();
  CHECK(zygote.exit_code() == 0);  // it went on serving until the front went
}

TEST_CASE("failed_to_start tells the front why, and returns 1") {
  auto pair = kcoral::Channel::socket_pair();
  REQUIRE(pair.has_value());
  Front front{kcoral::Channel(std::move(pair->first)), {}};
  kcoral::Sandbox sandbox(no_sandbox());
  kcoral::Zygote zygote(kcoral::ZygoteOptions{kcoral::WorkerOptions{}, {}, {}}, kcoral::test::executor(), sandbox,
                        kcoral::Channel(std::move(pair->second)));
  CHECK(zygote.failed_to_start("no such device") == 1);
  auto failed = front.expect<messages::ZygoteFailed>();
  CAPTURE(front.heard);
  REQUIRE(failed.has_value());
  CHECK(failed->message == "no such device");
}

TEST_CASE("with fork parents, the zygote's helpers fork the workers in turn, the zygote none; its ready names them, "
          "and closing its channel ends them all") {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox(), /*trial=*/true, {}, /*fork_parents=*/2);
  auto ready = zygote.front.expect<messages::ZygoteReady>();
  CAPTURE(zygote.front.heard);
  REQUIRE(ready.has_value());
  REQUIRE(ready->fork_parents.size() == 2);
  std::vector<pid_t> helpers;
  for (std::int64_t pid : ready->fork_parents) {
    helpers.push_back(static_cast<pid_t>(pid));
    CHECK(kcoral::parent_of(helpers.back()) == zygote.pid());
  }
  std::vector<Worker> workers;
  std::map<pid_t, int> by_parent;
  for (int i = 0; i < 4; ++i) {
    auto worker = fork_worker(zygote.front);
    REQUIRE(worker.has_value());
    CHECK(worker->pidfd_names == worker->pid);
    ++by_parent[kcoral::parent_of(worker->pid)];
    REQUIRE(worker->front.expect<messages::Ready>());
    workers.push_back(std::move(*worker));
  }
  CHECK(by_parent == std::map<pid_t, int>{{helpers[0], 2}, {helpers[1], 2}});
  // A worker's end comes through the zygote, as one it forked itself.
  auto built = calling("def main():\n    return 7\n");
  REQUIRE(workers[0].front.send_job(built));
  REQUIRE(workers[0].front.result().has_value());
  auto exited = zygote.front.expect<messages::Exited>();
  REQUIRE(exited.has_value());
  CHECK(exited->pid == workers[0].pid);
  zygote.front.channel = kcoral::Channel();
  CHECK(zygote.exit_code() == 0);
  for (const Worker& worker : workers) CHECK(ends_within(worker.process.pidfd()));
  for (pid_t helper : helpers) CHECK(::kill(helper, 0) != 0);
}

TEST_CASE("with fork parents, a fork goes to the helper with the fewest live workers, not the next in turn") {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox(), /*trial=*/true, {}, /*fork_parents=*/2);
  REQUIRE(zygote.front.expect<messages::ZygoteReady>());
  CAPTURE(zygote.front.heard);
  // One helper each (the second fork asked once the first was answered); the second ends.
  auto staying = fork_worker(zygote.front);
  REQUIRE(staying.has_value());
  auto ending = fork_worker(zygote.front);
  REQUIRE(ending.has_value());
  pid_t busy = kcoral::parent_of(staying->pid);
  pid_t idle = kcoral::parent_of(ending->pid);
  REQUIRE(busy != idle);
  REQUIRE(ending->front.expect<messages::Ready>());
  REQUIRE(ending->front.send_job(calling("def main():\n    return 7\n")));
  REQUIRE(ending->front.result().has_value());
  auto exited = zygote.front.expect<messages::Exited>();
  REQUIRE(exited.has_value());
  REQUIRE(exited->pid == ending->pid);
  // In turn it would be the busy one's; it goes to the one with no live worker, and so on
  // while the two are uneven.
  auto next = fork_worker(zygote.front);
  REQUIRE(next.has_value());
  CHECK(kcoral::parent_of(next->pid) == idle);
  auto after = fork_worker(zygote.front);
  REQUIRE(after.has_value());
  CHECK(kcoral::parent_of(after->pid) != kcoral::parent_of(next->pid));
}

TEST_CASE("a helper that dies fails the zygote, which says so and ends the other helpers and the workers") {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox(), /*trial=*/false, {}, /*fork_parents=*/3);
  auto ready = zygote.front.expect<messages::ZygoteReady>();
  REQUIRE(ready.has_value());
  REQUIRE(ready->fork_parents.size() == 3);
  auto worker = fork_worker(zygote.front);
  REQUIRE(worker.has_value());
  REQUIRE(worker->front.expect<messages::Ready>());
  ::kill(static_cast<pid_t>(ready->fork_parents[2]), SIGKILL);
  auto failed = zygote.front.expect<messages::ZygoteFailed>();
  CAPTURE(zygote.front.heard);
  REQUIRE(failed.has_value());
  CHECK(failed->message == "a helper of the worker parent exited");
  CHECK(zygote.exit_code() == 1);
  CHECK(ends_within(worker->process.pidfd()));
  for (std::int64_t helper : ready->fork_parents) CHECK(::kill(static_cast<pid_t>(helper), 0) != 0);
}

TEST_CASE("the trial passes without a sandbox") {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, no_sandbox(), /*trial=*/true);
  CHECK(zygote.front.expect<messages::ZygoteReady>().has_value());
  CAPTURE(zygote.front.heard);
}

TEST_CASE("the trial passes with the namespaces sandbox, and a sandboxed worker runs its program in its own PID "
          "namespace as the sandbox's user" *
          doctest::skip(!kcoral::test::sandbox_possible())) {
  kcoral::test::TempDir work_root;
  ZygoteProcess zygote(work_root, real_sandbox(work_root), /*trial=*/true);
  auto ready = zygote.front.expect<messages::ZygoteReady>();
  CAPTURE(zygote.front.heard);
  REQUIRE(ready.has_value());
  auto worker = fork_worker(zygote.front);
  REQUIRE(worker.has_value());
  CHECK(worker->pidfd_names == worker->pid);
  REQUIRE(worker->front.expect<messages::Ready>());
  auto built = calling("import os\ndef main():\n    return [os.getpid(), os.getuid(), os.getcwd()]\n");
  REQUIRE(worker->front.send_job(built));
  auto result = worker->front.result();
  CAPTURE(worker->front.heard);
  REQUIRE(result.has_value());
  REQUIRE_FALSE(result->error.has_value());
  Json out = Json::parse(result->results)["out"]["value"];
  CHECK(out[0]["value"] == 2);  // its namespace's init is 1
  CHECK(out[1]["value"] == 1000);
  CHECK(out[2]["value"].get<std::string>().starts_with("/tmp/"));
  auto exited = zygote.front.expect<messages::Exited>();
  REQUIRE(exited.has_value());
  CHECK(exited->pid == worker->pid);
  CHECK(exited->exit_code == 0);
}

TEST_CASE("the trial fails with the sandbox's reason where a worker's sandbox cannot be made, and the zygote does not "
          "serve" *
          doctest::skip(!kcoral::test::sandbox_possible())) {
  kcoral::test::TempDir work_root;
  kcoral::SandboxConfig config = real_sandbox(work_root);
  config.policy.memory_bytes = 16 << 20;  // less than the interpreter maps already
  ZygoteProcess zygote(work_root, config, /*trial=*/true);
  auto failed = zygote.front.expect<messages::ZygoteFailed>();
  CAPTURE(zygote.front.heard);
  REQUIRE(failed.has_value());
  CHECK(failed->message.starts_with("the sandbox cannot be set up here: "));
  CHECK(failed->message.find("--memory-limit-bytes is 16 MiB, but a worker already holds") != std::string::npos);
  CHECK(zygote.exit_code() == 1);
}

TEST_CASE("a worker whose sandbox cannot be made says why on its channel, and exits 1" *
          doctest::skip(!kcoral::test::sandbox_possible())) {
  kcoral::test::TempDir work_root;
  kcoral::SandboxConfig config = real_sandbox(work_root);
  config.policy.memory_bytes = 16 << 20;
  ZygoteProcess zygote(work_root, config);  // no trial: the front forks all the same
  REQUIRE(zygote.front.expect<messages::ZygoteReady>());
  auto worker = fork_worker(zygote.front);
  CAPTURE(zygote.front.heard);
  REQUIRE(worker.has_value());
  auto failed = worker->front.expect<messages::Failed>();
  CAPTURE(worker->front.heard);
  REQUIRE(failed.has_value());
  CHECK(failed->message.starts_with("--memory-limit-bytes is 16 MiB, but a worker already holds"));
  auto exited = zygote.front.expect<messages::Exited>();
  REQUIRE(exited.has_value());
  CHECK(exited->pid == worker->pid);
  CHECK(exited->exit_code == 1);
}

}  // TEST_SUITE
