// ZygoteHandle (kcoral-server/front/zygote_handle.cpp), the front's handle on the worker
// parent, against a stand-in parent: a small Python script started in its place (as
// `PYTHON -c BOOTSTRAP FLAGS...`, whose arguments it ignores) that speaks the channel on
// descriptor 3 as its mode says. A parent that says ready and forks is heard, its workers
// come held by their pidfds; one that sends the pidfd of another process is a broken
// parent; stop() reaps an exiting parent without blocking the strand, escalating to
// SIGKILL for one that ignores its closed channel and SIGTERM; the destructor waits.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "front_test_support.hpp"
#include "process_tree.hpp"
#include "zygote_handle.hpp"

using kcoral::ZygoteHandle;
using namespace std::chrono_literals;

namespace {

// The stand-in parent. FAKE_MODE (from --program-env, which the parent's environment
// gets): "good" answers each fork with a child that sleeps; "alien" sends its own pidfd
// for a child's; "stubborn" also ignores SIGTERM and its closed channel; "short" fails its
// first fork and makes the rest; "unasked" says a fork failed before any was asked for;
// "helper" forks a helper first, names it in its ready, and has it fork the workers;
// "stranger" names its own parent (the test) as a helper.
constexpr const char* kFakeParent = R"(#!/usr/bin/env python3
import ctypes, json, os, signal, socket, time
mode = os.environ.get("FAKE_MODE", "good")
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
channel = socket.socket(fileno=3)
def send(message, fds=()):
    frame = b"I" + json.dumps(message).encode()
    if fds:
        socket.send_fds(channel, [frame], list(fds))
    else:
        channel.send(frame)
helper = None
if mode == "helper":
    to_helper, from_main = os.pipe()
    to_main, from_helper = os.pipe()
    helper = os.fork()
    if helper == 0:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
        while os.read(to_helper, 1):
            pid = os.fork()
            if pid == 0:
                ctypes.CDLL(None).prctl(1, signal.SIGKILL)
                time.sleep(600)
                os._exit(0)
            os.write(from_helper, b"%10d" % pid)
        os._exit(0)
named = [helper] if helper else [os.getppid()] if mode == "stranger" else []
send({"type": "zygote_ready", "versions": {"python": "fake"}, "fork_parents": named})
if mode == "unasked":
    send({"type": "fork_failed", "message": "nothing asked"})
children = []
failed_once = False
while True:
    data = channel.recv(65536)
    if not data:
        break
    if json.loads(data[1:])["type"] != "fork":
        continue
    if mode == "short" and not failed_once:
        failed_once = True
        send({"type": "fork_failed", "message": "socketpair: Too many open files"})
        continue
    front, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    parent = os.getpid()
    if helper:
        os.write(from_main, b"f")
        pid = int(os.read(to_main, 10))
        pidfd = os.pidfd_open(pid)
        send({"type": "forked", "pid": pid}, [front.fileno(), pidfd])
        os.close(pidfd)
        front.close()
        continue
    pid = os.fork()
    if pid == 0:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: not outliving a killed parent
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(600)
        os._exit(0)
    children.append(pid)
    pidfd = os.pidfd_open(os.getpid() if mode == "alien" else pid)
    send({"type": "forked", "pid": pid}, [front.fileno(), pidfd])
    os.close(pidfd)
    front.close()
for pid in children + ([helper] if helper else []):
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
while mode == "stubborn":
    time.sleep(1)
)";

struct Harness {
  boost::asio::io_context io;
  ZygoteHandle::Strand strand{boost::asio::make_strand(io)};
  std::filesystem::path script;
  std::unique_ptr<ZygoteHandle> handle;
  std::map<std::string, std::string> versions;
  std::vector<kcoral::Process> workers;
  std::vector<std::string> failures;
  std::vector<std::string> fork_failures;

  explicit Harness(const std::string& mode) {
    char directory[] = "/tmp/kcoral-zygote-test-XXXXXX";
    REQUIRE(::mkdtemp(directory) != nullptr);
    script = std::filesystem::path(directory) / "fake-parent";
    std::ofstream(script) << kFakeParent;
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
    kcoral::ZygoteConfig config;
    config.python = script.string();
    config.worker.program_environment = {"FAKE_MODE=" + mode};
    handle = std::make_unique<ZygoteHandle>(
        strand, config,
        ZygoteHandle::Callbacks{[this](std::map<std::string, std::string> said) { versions = std::move(said); },
                                [this](kcoral::Process worker, kcoral::UniqueFd) { workers.push_back(std::move(worker)); },
                                [](pid_t, std::string, std::optional<std::string>) {},
                                [this](std::string why) { failures.push_back(std::move(why)); },
                                [this](std::string why) { fork_failures.push_back(std::move(why)); }});
    REQUIRE(handle->start().has_value());
  }
  ~Harness() {
    handle.reset();
    std::filesystem::remove_all(script.parent_path());
  }

  template <class Predicate>
  bool pump(Predicate done, std::chrono::milliseconds within = 10s) {
    return kcoral::test::pump_until(io, done, within);
  }
};

// Whether `pid` is still a child of this process that nobody reaped (a zombie included).
bool unreaped(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0;
}

}  // namespace

TEST_CASE("a worker parent whose helper forks is heard: a worker whose parent is a helper it named is taken") {
  Harness h("helper");
  REQUIRE(h.pump([&] { return !h.versions.empty(); }));
  h.handle->request_fork({});
  REQUIRE(h.pump([&] { return !h.workers.empty() || !h.failures.empty(); }));
  CAPTURE(h.failures);
  REQUIRE(h.workers.size() == 1);
  CHECK(kcoral::parent_of(h.workers[0].pid()) != h.handle->pid());  // the helper's child
  CHECK(h.workers[0].signal(0));
  CHECK(h.failures.empty());
}

TEST_CASE("a worker parent that names as its helper a process not its child is a broken parent") {
  Harness h("stranger");
  REQUIRE(h.pump([&] { return !h.failures.empty(); }));
  CHECK(h.failures[0] == "the worker parent named pid " + std::to_string(::getpid()) +
                             " as a helper, not a child of its own");
  CHECK(h.versions.empty());
}

TEST_CASE("a worker parent that says ready and forks is heard, its workers held by their pidfds") {
  Harness h("good");
  REQUIRE(h.pump([&] { return !h.versions.empty(); }));
  CHECK(h.versions.at("python") == "fake");
  CHECK(h.handle->running());
  h.handle->request_fork({});
  REQUIRE(h.pump([&] { return !h.workers.empty(); }));
  CHECK(h.workers[0].signal(0));  // the parent's child, alive, held by the pidfd it sent
  CHECK(h.failures.empty());
  pid_t parent = h.handle->pid();
  auto started = std::chrono::steady_clock::now();
  h.handle->stop();
  CHECK(std::chrono::steady_clock::now() - started < 100ms);  // stop() does not wait
  CHECK_FALSE(h.handle->running());
  // The parent kills its worker and exits on its closed channel; the strand reaps it.
  CHECK(h.pump([&] { return !unreaped(parent); }));
  CHECK_FALSE(h.workers[0].signal(0));
}

TEST_CASE("a fork the worker parent could not make is heard as such, and the parent serves on") {
  Harness h("short");
  REQUIRE(h.pump([&] { return !h.versions.empty(); }));
  h.handle->request_fork({});
  REQUIRE(h.pump([&] { return !h.fork_failures.empty(); }));
  CHECK(h.fork_failures[0] == "socketpair: Too many open files");
  CHECK(h.failures.empty());
  CHECK(h.handle->running());
  h.handle->request_fork({});
  REQUIRE(h.pump([&] { return !h.workers.empty(); }));
  CHECK(h.workers[0].signal(0));
  CHECK(h.failures.empty());
}

TEST_CASE("a worker parent that says a fork failed when none was asked for is broken") {
  Harness h("unasked");
  REQUIRE(h.pump([&] { return !h.failures.empty(); }));
  CHECK(h.failures[0] == "the worker parent failed a fork nobody asked for");
  CHECK(h.fork_failures.empty());
  CHECK_FALSE(h.handle->running());
}

TEST_CASE("a worker parent that sends the pidfd of another process for its worker is broken") {
  Harness h("alien");
  REQUIRE(h.pump([&] { return !h.versions.empty(); }));
  pid_t parent = h.handle->pid();
  h.handle->request_fork({});
  REQUIRE(h.pump([&] { return !h.failures.empty(); }));
  CHECK(h.failures[0].find("is not a pidfd of process") != std::string::npos);
  CHECK(h.workers.empty());
  CHECK_FALSE(h.handle->running());
  CHECK(h.pump([&] { return !unreaped(parent); }));  // killed and reaped
}

TEST_CASE("a worker parent that ignores its closed channel and SIGTERM is killed and reaped, the strand free") {
  Harness h("stubborn");
  REQUIRE(h.pump([&] { return !h.versions.empty(); }));
  pid_t parent = h.handle->pid();
  h.handle->stop();
  bool other_work_ran = false;
  boost::asio::post(h.strand, [&] { other_work_ran = true; });
  CHECK(h.pump([&] { return other_work_ran; }, 1s));  // the strand serves while the parent exits
  CHECK(unreaped(parent));
  CHECK(h.pump([&] { return !unreaped(parent); }, 10s));  // SIGKILL three seconds on
}

TEST_CASE("destroyed while its worker parent is still exiting, the handle waits for it") {
  pid_t parent = -1;
  {
    Harness h("stubborn");
    REQUIRE(h.pump([&] { return !h.versions.empty(); }));
    parent = h.handle->pid();
    h.handle->stop();
  }
  CHECK_FALSE(unreaped(parent));
}
