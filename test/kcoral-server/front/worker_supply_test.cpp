// WorkerSupply (kcoral-server/front/worker_supply.cpp), the front's supply of prepared
// workers, against a stand-in worker parent (fake_worker_parent.hpp): a small Python
// script started in its place that speaks the channel, forks a child per request, reports
// each child's exit, and logs what it did. Each child plays a worker as the group it was
// forked for says ("fail..." groups say they cannot start, the others say ready and wait). Checked: every group is
// brought to strength (the larger of workers per group and context inits at once), each
// fork pinned to its group; the start trial is announced once, ready with the parent's
// versions or failed with a group's first failure; a gone worker is replaced and its work
// directory removed; a group whose starts fail forks one worker at a time, again after
// its back-off; a parent that dies after the start is restarted and its starting workers
// discarded; abort_running answers the running jobs (only the one named, when named);
// stop() kills the workers and ends the parent. An on-demand group (a set of GPUs) forks
// only the workers wanted, each seeing its GPUs and given its GPU set, stays out of the
// start trial, and its failed starts neither fail the trial nor back off; a parent that
// dies fails each of its starts that it cut short.
#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fake_worker_parent.hpp"
#include "front_test_support.hpp"
#include "kcoral/program_builder.hpp"
#include "worker_supply.hpp"

using kcoral::WorkerSupply;
using namespace std::chrono_literals;

namespace {


// A job of one instruction's program, enough for a worker to be handed and to hold.
std::shared_ptr<kcoral::ExecuteJob> make_job(const std::string& request_id) {
  kcoral::ProgramBuilder builder;
  builder.return_value("out", builder.upload_bytes("b", "data"));
  auto built = builder.build();
  REQUIRE(built.has_value());
  auto job = std::make_shared<kcoral::ExecuteJob>();
  job->request_id = request_id;
  job->admitted.program_json = built->program.to_json();
  job->admitted.program = std::move(built->program);
  job->admitted.blobs = std::move(built->blobs);
  job->admitted.timeout_seconds = 30;
  job->admitted.max_returned_bytes = 1 << 20;
  REQUIRE(job->seal_program_text().has_value());
  return job;
}

// Whether `pid` is still a child of this process that nobody reaped (a zombie included).
bool unreaped(pid_t pid) {
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0;
}

bool has_exited(const kcoral::WorkerPtr& worker) {
  pollfd exited{worker->pidfd(), POLLIN, 0};
  return ::poll(&exited, 1, 0) == 1;
}

struct Harness {
  boost::asio::io_context io;
  WorkerSupply::Strand strand{boost::asio::make_strand(io)};
  kcoral::LeaseBroker leases;  // one GPU per group, as on a GPU server
  std::filesystem::path directory;
  std::unique_ptr<WorkerSupply> supply;

  std::optional<std::map<std::string, std::string>> ready;
  int readies = 0;
  std::vector<std::string> failures;  // what `failed` said
  int parent_readies = 0;
  std::vector<kcoral::WorkerPtr> idle;  // each `idle` event's worker
  std::vector<kcoral::WorkerPtr> gone;
  std::vector<WorkerSupply::StartEnd> start_ends;
  std::vector<std::size_t> forks_at_end;  // the forks the parent had made at each start's end
  std::map<std::string, kcoral::JobOutcome> finished;  // by request id

  // `groups`: one per GPU, group i on GPU i; `sets`: on-demand groups after those.
  explicit Harness(std::vector<std::string> groups, std::size_t workers_per_group = 1,
                   std::size_t context_inits_at_once = 1, bool broken_parent = false,
                   std::vector<kcoral::WorkerGroup> sets = {}, std::vector<std::string> environment = {})
      : leases(groups.size(), context_inits_at_once) {
    char made[] = "/tmp/kcoral-supply-test-XXXXXX";
    REQUIRE(::mkdtemp(made) != nullptr);
    directory = made;
    std::filesystem::path script = directory / "fake-parent";
    std::ofstream(script) << kcoral::test::kFakeWorkerParent;
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
    WorkerSupply::Config config;
    config.groups.clear();
    for (std::size_t gpu = 0; gpu < groups.size(); ++gpu) config.groups.push_back({groups[gpu], {gpu}, false});
    for (kcoral::WorkerGroup& set : sets) config.groups.push_back(std::move(set));
    config.workers_per_group = workers_per_group;
    config.context_inits_at_once = context_inits_at_once;
    config.zygote.python = script.string();
    config.zygote.worker.work_root = (directory / "work").string();
    // A broken parent is given a directory for its log: it exits on its first line.
    if (broken_parent) std::filesystem::create_directory(directory / "log");
    environment.push_back("FAKE_LOG=" + (directory / "log").string());
    config.zygote.worker.program_environment = std::move(environment);
    WorkerSupply::Events events{
        [this](std::map<std::string, std::string> versions) {
          ++readies;
          ready = std::move(versions);
        },
        [this](const std::string& message) { failures.push_back(message); },
        [this](const kcoral::WorkerPtr& worker) {
          idle.push_back(worker);
          supply->top_up();  // as the pool does on each idle worker
        },
        [this](const kcoral::WorkerPtr&, std::shared_ptr<kcoral::ExecuteJob> job, kcoral::JobOutcome outcome) {
          finished.emplace(job->request_id, std::move(outcome));
        },
        [this](const kcoral::WorkerPtr& worker) { gone.push_back(worker); },
        [this](const WorkerSupply::StartEnd& end) {
          start_ends.push_back(end);
          forks_at_end.push_back(forks().size());
        },
        [this] { ++parent_readies; }};
    supply = std::make_unique<WorkerSupply>(strand, std::move(config), leases, std::move(events));
    REQUIRE(supply->start().has_value());
  }
  ~Harness() {
    supply.reset();
    std::filesystem::remove_all(directory);
  }

  template <class Predicate>
  bool pump(Predicate done, std::chrono::milliseconds within = 10s) {
    return kcoral::test::pump_until(io, done, within);
  }

  // The parent's log, as lines of words.
  std::vector<std::vector<std::string>> log() const { return kcoral::test::log_words(directory / "log"); }
  std::vector<std::string> parents() const {
    std::vector<std::string> pids;
    for (const auto& line : log())
      if (line[0] == "parent") pids.push_back(line[1]);
    return pids;
  }
  // The group each fork was asked for, by the pid it got.
  std::map<pid_t, std::string> forks() const {
    std::map<pid_t, std::string> groups;
    for (const auto& line : log())
      if (line[0] == "fork") groups[std::stoi(line[1])] = line.size() > 2 ? line[2] : "";
    return groups;
  }
  std::size_t idle_in(std::size_t group) const {
    return static_cast<std::size_t>(
        std::count_if(idle.begin(), idle.end(), [&](const kcoral::WorkerPtr& w) { return w->group() == group; }));
  }
};

bool kill_worker(const kcoral::WorkerPtr& worker) {
  return ::syscall(SYS_pidfd_send_signal, worker->pidfd(), SIGKILL, nullptr, 0) == 0;
}

}  // namespace

TEST_SUITE("worker_supply") {

TEST_CASE("every group is brought to strength, each fork pinned to its group, and ready is said once") {
  Harness h({"gpu-a", "gpu-b"}, 2);
  REQUIRE(h.pump([&] { return h.idle.size() == 4; }));
  REQUIRE(h.ready.has_value());
  CHECK(h.readies == 1);
  CHECK(h.parent_readies == 1);
  CHECK(h.failures.empty());
  CHECK(h.ready->at("python") == "fake");  // the parent's versions, passed on
  CHECK(h.idle_in(0) == 2);
  CHECK(h.idle_in(1) == 2);
  auto forks = h.forks();
  CHECK(forks.size() == 4);  // no more than the strength asks for
  for (const kcoral::WorkerPtr& worker : h.idle)
    CHECK(forks.at(worker->pid()) == (worker->group() == 0 ? "gpu-a" : "gpu-b"));
  CHECK(h.start_ends.size() == 4);
  for (const auto& end : h.start_ends) {
    CHECK_FALSE(end.failure.has_value());
    CHECK(end.visible_devices == (end.group == 0 ? "gpu-a" : "gpu-b"));  // what the server's log names
  }
  CHECK(h.supply->starts().counts().ready == 4);
}

TEST_CASE("a group keeps as many prepared as it may make contexts at once, when that is more") {
  Harness h({""}, 1, 3);
  REQUIRE(h.pump([&] { return h.idle.size() == 3; }));
  CHECK(h.forks().size() == 3);
  CHECK(h.readies == 1);
}

TEST_CASE("a group's first start failing fails the start with its reason, once; ready is never said") {
  Harness h({"gpu-a", "fail-b"});
  REQUIRE(h.pump([&] { return !h.failures.empty(); }));
  CHECK(h.failures.size() == 1);
  CHECK(h.failures[0].find("a worker failed to start") != std::string::npos);
  CHECK(h.failures[0].find("no device for fail-b") != std::string::npos);
  REQUIRE(h.pump([&] { return h.idle.size() == 1; }));  // the other group's worker still starts
  CHECK(h.idle[0]->group() == 0);
  CHECK_FALSE(h.ready.has_value());
  auto failed = std::find_if(h.start_ends.begin(), h.start_ends.end(), [](const auto& end) { return end.failure; });
  REQUIRE(failed != h.start_ends.end());
  CHECK(failed->group == 1);
  CHECK(h.forks().at(failed->pid) == "fail-b");
}

TEST_CASE("a worker parent that exits before it is ready fails the start") {
  Harness h({""}, 1, 1, /*broken_parent=*/true);
  REQUIRE(h.pump([&] { return !h.failures.empty(); }));
  CHECK(h.failures.size() == 1);
  CHECK(h.failures[0].find("the worker parent exited") != std::string::npos);
  CHECK_FALSE(h.ready.has_value());
  CHECK(h.parent_readies == 0);
}

TEST_CASE("a worker that is gone is replaced, and its work directory removed") {
  Harness h({""}, 2);
  REQUIRE(h.pump([&] { return h.idle.size() == 2; }));
  kcoral::WorkerPtr victim = h.idle[0];
  std::filesystem::path left = h.directory / "work" / std::to_string(victim->pid());
  std::filesystem::create_directories(left / "inside");
  REQUIRE(kill_worker(victim));
  REQUIRE(h.pump([&] { return h.idle.size() == 3; }));
  REQUIRE(h.gone.size() == 1);
  CHECK(h.gone[0] == victim);
  CHECK_FALSE(std::filesystem::exists(left));
  CHECK(h.idle[2]->pid() != victim->pid());
  CHECK(h.forks().size() == 3);
  CHECK(h.readies == 1);
}

TEST_CASE("a fork the parent cannot make is a failed start of its group; the parent and its workers go on") {
  Harness h({"short"}, 2);
  REQUIRE(h.pump([&] { return h.idle.size() == 2; }));
  kcoral::WorkerPtr survivor = h.idle[1];
  REQUIRE(kill_worker(h.idle[0]));  // its replacement is the third fork
  REQUIRE(h.pump([&] { return h.start_ends.size() == 3; }));
  const auto& failed = h.start_ends[2];
  REQUIRE(failed.failure.has_value());
  CHECK(failed.group == 0);
  CHECK(failed.pid == std::stoi(h.parents().at(0)));
  CHECK(*failed.failure == "the worker parent could not fork it: socketpair: Too many open files");
  CHECK(h.supply->starts().backing_off(0));
  // After the back-off, the fourth fork makes the replacement; nothing else was disturbed.
  REQUIRE(h.pump([&] { return h.idle.size() == 3; }));
  CHECK(h.parents().size() == 1);
  CHECK_FALSE(has_exited(survivor));
  CHECK(h.failures.empty());
  CHECK(h.readies == 1);
}

TEST_CASE("a group whose starts fail forks one worker at a time, again once its back-off has passed") {
  Harness h({"fail"}, 3);
  REQUIRE(h.pump([&] { return h.start_ends.size() >= 6; }));
  CHECK(h.failures.size() == 1);  // the trial's failure, said once
  // The first three were asked for together; once they had failed, each fork waited for
  // the previous start's end (and the back-off after it): when a start ended, no other
  // had been forked.
  for (std::size_t i = 3; i < h.start_ends.size(); ++i) {
    CAPTURE(i);
    CHECK(h.forks_at_end[i] == i + 1);
  }
  CHECK(h.supply->starts().failures_in_row(0) >= 6);
  CHECK(h.supply->starts().backing_off(0));
}

TEST_CASE("a worker parent that dies after the start is restarted; its starting workers are discarded") {
  Harness h({""}, 2);
  REQUIRE(h.pump([&] { return h.idle.size() == 2; }));
  auto first = h.parents();
  REQUIRE(first.size() == 1);
  // Its children die with it (they asked to); a new parent comes a second later.
  REQUIRE(::kill(std::stoi(first[0]), SIGKILL) == 0);
  REQUIRE(h.pump([&] { return h.parents().size() == 2 && h.idle.size() == 4; }));
  auto second = h.parents();
  CHECK(second[1] != second[0]);
  // The parent's failure counts as a failed start of the group.
  auto failed = std::find_if(h.start_ends.begin(), h.start_ends.end(), [](const auto& end) { return end.failure; });
  REQUIRE(failed != h.start_ends.end());
  CHECK(failed->group == 0);
  CHECK(failed->pid == std::stoi(first[0]));  // the parent that failed, for the event log
  CHECK(failed->failure->find("the worker parent failed: the worker parent exited") != std::string::npos);
  // The new workers are the new parent's; the start was announced once, the parent ready once.
  auto forks = h.forks();
  for (std::size_t i = 2; i < 4; ++i) CHECK(forks.count(h.idle[i]->pid()) == 1);
  CHECK(h.readies == 1);
  CHECK(h.parent_readies == 1);
  CHECK(h.failures.empty());
  CHECK(h.gone.size() == 2);  // the dead parent's workers
}

TEST_CASE("abort_running answers the running jobs with the error given, or only the one named") {
  Harness h({""}, 3);
  REQUIRE(h.pump([&] { return h.idle.size() == 3; }));
  auto one = make_job("one");
  auto two = make_job("two");
  REQUIRE(h.idle[0]->run(one));
  REQUIRE(h.idle[1]->run(two));
  h.supply->abort_running({kcoral::ErrorKind::timeout, "took too long"}, one.get());
  REQUIRE(h.pump([&] { return h.finished.count("one") == 1; }));
  CHECK(h.finished.count("two") == 0);
  REQUIRE_FALSE(h.finished.at("one").result.has_value());
  CHECK(h.finished.at("one").result.error().kind == kcoral::ErrorKind::timeout);
  CHECK(h.pump([&] { return has_exited(h.idle[0]); }));  // its worker killed
  CHECK_FALSE(has_exited(h.idle[1]));

  h.supply->abort_running({kcoral::ErrorKind::busy, "shutting down"});
  REQUIRE(h.pump([&] { return h.finished.count("two") == 1; }));
  REQUIRE_FALSE(h.finished.at("two").result.has_value());
  CHECK(h.finished.at("two").result.error().kind == kcoral::ErrorKind::busy);
  CHECK(h.finished.at("two").result.error().message == "shutting down");
  CHECK_FALSE(has_exited(h.idle[2]));  // idle: nothing to abort
}

TEST_CASE("stop() kills every worker and ends the worker parent") {
  Harness h({"a", "b"});
  REQUIRE(h.pump([&] { return h.idle.size() == 2; }));
  pid_t parent = std::stoi(h.parents().at(0));
  h.supply->stop();
  CHECK(h.pump([&] { return has_exited(h.idle[0]) && has_exited(h.idle[1]) && !unreaped(parent); }));
}

TEST_CASE("an on-demand group forks only the workers wanted, each seeing its GPUs, and is not in the trial") {
  Harness h({"gpu-a", "gpu-b"}, 2, 1, false, {{"gpu-a,gpu-b", {0, 1}, true}});
  REQUIRE(h.pump([&] { return h.idle.size() == 4; }));
  CHECK(h.readies == 1);  // the trial passed without a worker of the set group
  for (int i = 0; i < 20; ++i) h.io.run_for(5ms);
  CHECK(h.forks().size() == 4);  // none of the set group's: none is wanted
  h.supply->want(2, 1);
  h.supply->top_up();
  REQUIRE(h.pump([&] { return h.idle.size() >= 5; }));
  // An idle worker of an on-demand group is its owner's (the pool runs or lets it go at
  // once), not one of those wanted: while one is wanted, each the test leaves idle is
  // followed by another. None is forked once none is wanted.
  h.supply->want(2, 0);
  const kcoral::WorkerPtr set_worker = h.idle[4];
  CHECK(set_worker->group() == 2);
  CHECK(set_worker->gpus() == std::vector<std::size_t>{0, 1});
  CHECK(h.idle[0]->gpus().size() == 1);
  for (int i = 0; i < 40; ++i) h.io.run_for(5ms);
  auto forks = h.forks();
  for (int i = 0; i < 40; ++i) h.io.run_for(5ms);
  CHECK(h.forks().size() == forks.size());
  CHECK(forks.at(set_worker->pid()) == "gpu-a,gpu-b");
  std::size_t of_set = 0;
  for (const auto& [pid, group] : forks) of_set += group == "gpu-a,gpu-b" ? 1 : 0;
  CHECK(of_set == forks.size() - 4);
}

TEST_CASE("an on-demand group whose starts fail: each wanted start fails, with no back-off between them") {
  Harness h({"gpu-a", "gpu-b"}, 1, 1, false, {{"fail,gpu-a,gpu-b", {0, 1}, true}});
  REQUIRE(h.pump([&] { return h.idle.size() == 2; }));
  REQUIRE(h.ready.has_value());
  h.supply->want(2, 1);
  h.supply->top_up();
  // Still wanted after each failure, so forked again at once (the pool lowers what it
  // wants as it answers the program each start was for); a back-off would space them out
  // by 0.1, 0.2, 0.4 s and more.
  auto asked = std::chrono::steady_clock::now();
  REQUIRE(h.pump([&] { return h.start_ends.size() >= 6; }));
  CHECK(std::chrono::steady_clock::now() - asked < 500ms);
  h.supply->want(2, 0);
  REQUIRE(h.start_ends[2].failure.has_value());
  CHECK(h.start_ends[2].group == 2);
  CHECK(*h.start_ends[2].failure == "no device for fail,gpu-a,gpu-b");
  CHECK(h.start_ends[2].visible_devices == "fail,gpu-a,gpu-b");
  CHECK_FALSE(h.supply->starts().backing_off(2));
  CHECK(h.supply->starts().failures_in_row(2) >= 4);
  CHECK_FALSE(h.supply->starts().failing());
  CHECK(h.failures.empty());  // the start trial did not fail
  CHECK(h.readies == 1);
}

TEST_CASE("a worker parent that dies fails each start of an on-demand group it cut short") {
  Harness h({"gpu-a"}, 1, 1, false, {{"gpu-a,gpu-b", {0, 1}, true}}, {"FAKE_SET_START_S=30"});
  REQUIRE(h.pump([&] { return h.idle.size() == 1; }));
  h.supply->want(1, 2);
  h.supply->top_up();
  REQUIRE(h.pump([&] { return h.forks().size() == 3; }));  // two set workers, starting for 30 s
  h.supply->want(1, 0);  // the programs they were for were answered: none after the restart
  REQUIRE(::kill(std::stoi(h.parents().at(0)), SIGKILL) == 0);
  auto failed_in = [&](std::size_t group) {
    return std::count_if(h.start_ends.begin(), h.start_ends.end(),
                         [&](const auto& end) { return end.group == group && end.failure.has_value(); });
  };
  REQUIRE(h.pump([&] { return failed_in(1) == 2 && failed_in(0) == 1; }));
  for (const auto& end : h.start_ends)
    if (end.failure) CHECK(end.failure->find("the worker parent failed") != std::string::npos);
  REQUIRE(h.pump([&] { return h.parents().size() == 2 && h.idle.size() == 2; }));  // restarted
  for (int i = 0; i < 40; ++i) h.io.run_for(5ms);
  CHECK(failed_in(1) == 2);  // the starting ones were discarded, not failed again
  CHECK(h.forks().size() == 4);  // gpu-a's replacement only
  CHECK(h.failures.empty());
}

}  // TEST_SUITE
