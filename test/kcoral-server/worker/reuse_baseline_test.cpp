// ReuseBaseline (kcoral-server/worker/reuse_baseline.cpp), with the real executor: a
// thread started after the baseline departs from it, by name, unless it is named as a
// tool's (CUPTI's, for benchmark()); a tool's thread that was there at the baseline is
// left out of both counts; a descriptor left open is named with its file; one that ends
// within the settling time is not counted.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "libkcoral/executor_support.hpp"
#include "reuse_baseline.hpp"

namespace {

using namespace std::chrono_literals;

// A thread named `name` that runs until `stop`, with its id.
class Running {
 public:
  explicit Running(const char* name) {
    thread_ = std::thread([this, name] {
      ::prctl(PR_SET_NAME, name, 0, 0, 0);
      id_ = static_cast<int>(::gettid());
      while (!stop_) std::this_thread::sleep_for(1ms);
    });
    while (id_ == 0) std::this_thread::sleep_for(1ms);
  }
  ~Running() {
    stop_ = true;
    thread_.join();
  }
  int id() const { return id_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> id_{0};
  std::thread thread_;
};

}  // namespace

TEST_SUITE("reuse_baseline") {

TEST_CASE("a thread started after the baseline departs from it, by name, unless it is a tool's") {
  kcoral::Executor& executor = kcoral::test::executor();
  auto baseline = kcoral::ReuseBaseline::capture(executor);
  CHECK_FALSE(baseline.departure_now(executor, {}, 0ms));
  Running thread("kc-tool");
  auto why = baseline.departure_now(executor, {}, 5ms);
  REQUIRE(why);
  CHECK(why->starts_with("threads: "));
  CHECK(why->ends_with(" (new: kc-tool)"));
  CHECK_FALSE(baseline.departure_now(executor, {}, 0ms, {thread.id()}));
}

TEST_CASE("a tool's thread there at the baseline is in neither count") {
  kcoral::Executor& executor = kcoral::test::executor();
  Running thread("kc-tool");
  auto baseline = kcoral::ReuseBaseline::capture(executor);
  CHECK_FALSE(baseline.departure_now(executor, {}, 0ms, {thread.id()}));
}

TEST_CASE("a thread that ends within the settling time is not counted") {
  kcoral::Executor& executor = kcoral::test::executor();
  auto baseline = kcoral::ReuseBaseline::capture(executor);
  std::thread brief([] { std::this_thread::sleep_for(5ms); });
  brief.detach();
  CHECK_FALSE(baseline.departure_now(executor, {}, 500ms));
}

TEST_CASE("a descriptor left open is named with its file; an answer's is left out") {
  kcoral::Executor& executor = kcoral::test::executor();
  auto baseline = kcoral::ReuseBaseline::capture(executor);
  int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  auto why = baseline.departure_now(executor, {}, 0ms);
  CHECK(why == "descriptors: " + std::to_string(fd) + " (/dev/null) left open");
  CHECK_FALSE(baseline.departure_now(executor, {fd}, 0ms));
  ::close(fd);
}

}  // TEST_SUITE
