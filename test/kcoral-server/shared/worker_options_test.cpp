// The worker parent's command line (kcoral-server/shared/worker_options.cpp): what the
// front writes, the worker reads back whole, every field; a missing or malformed flag is
// an error that names it.
#include <doctest/doctest.h>

#include <algorithm>

#include "worker_options.hpp"

namespace {

kcoral::WorkerOptions every_field_set() {
  kcoral::WorkerOptions options;
  options.control_fd = 7;
  options.device = "gpu";
  options.work_root = "/tmp/work root";
  options.init_path = "/opt/kcoral/bin/kcoral-init";
  options.preload = {"numpy", "tvm.script.tirx", "kcoral._native"};
  options.programs_per_worker = 64;
  options.fork_parents = 3;
  options.reuse_check = false;
  options.sandboxed = false;
  options.sandbox_policy.memory_bytes = std::uint64_t{8} << 30;
  options.sandbox_policy.file_size_bytes = 12345;
  options.sandbox_policy.processes = 99;
  options.sandbox_policy.open_files = 200;
  options.sandbox_policy.scratch_bytes = std::uint64_t{3} << 30;
  options.compile_cache_bytes = 0;
  options.sandbox_policy.first_uid = 1879048192;
  options.sandbox_policy.last_uid = 1879113727;
  options.sandbox_policy.readable_paths = {"/data", "/models/with space"};
  options.program_environment = {"A=1", "B=x=y", "EMPTY="};
  return options;
}

}  // namespace

TEST_CASE("every field of the worker's options survives to_argv and parse") {
  kcoral::WorkerOptions written = every_field_set();
  auto read = kcoral::WorkerOptions::parse(written.to_argv());
  REQUIRE(read);
  CHECK(*read == written);

  kcoral::WorkerOptions defaults;  // and the other way round for every bool and list
  defaults.work_root = "/w";
  defaults.sandbox_policy.first_uid = 1000;
  defaults.sandbox_policy.last_uid = 1003;
  auto plain = kcoral::WorkerOptions::parse(defaults.to_argv());
  REQUIRE(plain);
  CHECK(*plain == defaults);
  CHECK(plain->preload.empty());
}

TEST_CASE("a worker's options without one of the required flags are refused, naming it") {
  std::vector<std::string> argv = every_field_set().to_argv();
  for (std::string flag : {"--work-root", "--sandbox-uid-range", "--memory-limit-bytes", "--device"}) {
    std::vector<std::string> without = argv;
    auto at = std::find(without.begin(), without.end(), flag);
    REQUIRE(at != without.end());
    without.erase(at, at + 2);
    auto parsed = kcoral::WorkerOptions::parse(without);
    REQUIRE_FALSE(parsed);
    CHECK(parsed.error().message.find(flag) != std::string::npos);
  }
}

TEST_CASE("malformed values of the worker's options are refused") {
  auto with = [](const std::string& flag, const std::string& value) {
    std::vector<std::string> argv = every_field_set().to_argv();
    *(std::find(argv.begin(), argv.end(), flag) + 1) = value;
    return kcoral::WorkerOptions::parse(argv);
  };
  CHECK_FALSE(with("--device", "tpu"));
  CHECK_FALSE(with("--reuse-check", "maybe"));
  CHECK_FALSE(with("--programs-per-worker", "0"));
  CHECK_FALSE(with("--memory-limit-bytes", "-1"));
  CHECK_FALSE(with("--sandbox-uid-range", "5"));
  CHECK_FALSE(with("--sandbox-uid-range", "0-10"));
  CHECK_FALSE(kcoral::WorkerOptions::parse({"--no-such-flag", "1"}));
}
