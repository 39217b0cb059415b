// sandbox_entry (kcoral-server/worker/sandbox_entry.cpp), the steps that need no
// namespace, each in a child process (they change the process that takes them):
// make_directories makes a path and its parents, and says what failed; keep_only closes
// every descriptor but those kept and points the standard streams at /dev/null;
// apply_limits sets each limit, keeps a lower hard limit the server was given, and refuses
// a memory limit the worker already exceeds, saying what to raise it to (the address
// space on a CPU server, the data segment on a GPU one); find_gpus reads the driver's GPU
// list (a made-up one here) and gives the GPUs a worker's CUDA_VISIBLE_DEVICES names, in
// its order, refusing one the driver does not list. The steps that make namespaces
// and mounts are checked through Sandbox::enter (sandbox_test.cpp).
#include <doctest/doctest.h>

#include <dirent.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>

#include "kcoral-server/worker/sandbox_support.hpp"
#include "sandbox.hpp"
#include "sandbox_entry.hpp"

using kcoral::test::ChildReport;
using kcoral::test::in_child;
using kcoral::test::report;
namespace entry = kcoral::sandbox_entry;
namespace fs = std::filesystem;

namespace {

std::string soft_and_hard(int resource) {
  rlimit limit{};
  ::getrlimit(resource, &limit);
  auto text = [](rlim_t value) { return value == RLIM_INFINITY ? std::string("unlimited") : std::to_string(value); };
  return text(limit.rlim_cur) + " " + text(limit.rlim_max);
}

}  // namespace

TEST_SUITE("sandbox_entry") {

TEST_CASE("make_directories makes a path with its parents, and says which path it could not make") {
  std::string pattern = (fs::temp_directory_path() / "kcoral-entry-test-XXXXXX").string();
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  fs::path base = pattern;
  CHECK(entry::make_directories((base / "a" / "b" / "c").string()).has_value());
  CHECK(fs::is_directory(base / "a" / "b" / "c"));
  CHECK(entry::make_directories((base / "a" / "b").string()).has_value());  // there already
  std::ofstream(base / "file") << "x";
  auto through_file = entry::make_directories((base / "file" / "d").string());
  REQUIRE_FALSE(through_file.has_value());
  CHECK(through_file.error().message.starts_with("creating " + (base / "file" / "d").string() + ": "));
  fs::remove_all(base);
}

TEST_CASE("keep_only leaves the kept descriptors open, closes the rest, and points the standard streams at /dev/null") {
  ChildReport child = in_child([](int fd) {
    // Standard streams that are not /dev/null to begin with.
    int elsewhere = ::open("/proc/self/status", O_RDONLY);
    for (int stream = 0; stream < 3; ++stream) ::dup2(elsewhere, stream);
    ::close(elsewhere);
    int kept = ::open("/proc/self/status", O_RDONLY);  // not close-on-exec: closed all the same
    int closed = ::open("/proc/self/status", O_RDONLY);
    int closed_too = ::dup(closed);
    if (auto status = entry::keep_only({fd, kept}); !status) return report(fd, "kept", status.error().message);
    report(fd, "kept", ::fcntl(kept, F_GETFD) >= 0 ? "open" : "closed");
    report(fd, "closed", ::fcntl(closed, F_GETFD) < 0 && ::fcntl(closed_too, F_GETFD) < 0 ? "closed" : "open");
    std::error_code ignored;
    std::string streams;
    for (int stream = 0; stream < 3; ++stream)
      streams += fs::read_symlink("/proc/self/fd/" + std::to_string(stream), ignored).string() + " ";
    report(fd, "streams", streams);
    int count = 0;  // the listing's own descriptor among them
    if (DIR* directory = ::opendir("/proc/self/fd")) {
      while (dirent* entry = ::readdir(directory)) count += entry->d_name[0] != '.';
      ::closedir(directory);
    }
    report(fd, "open", std::to_string(count));
  });
  CAPTURE(child.text);
  CHECK(child["kept"] == "open");
  CHECK(child["closed"] == "closed");
  CHECK(child["streams"] == "/dev/null /dev/null /dev/null ");
  CHECK(child["open"] == "6");  // 0, 1, 2, the report, the kept one, the listing
}

TEST_CASE("apply_limits sets every limit, keeping a lower hard limit the server was given") {
  ChildReport child = in_child([](int fd) {
    rlimit lower{100, 100};
    ::setrlimit(RLIMIT_NOFILE, &lower);  // as if the server had been started with ulimit -n 100
    kcoral::SandboxConfig config;
    config.policy.memory_bytes = std::uint64_t{6} << 30;
    config.policy.file_size_bytes = 1 << 20;
    config.policy.processes = 77;
    config.policy.open_files = 1024;
    if (auto status = entry::apply_limits(config); !status) return report(fd, "applied", status.error().message);
    report(fd, "applied", "ok");
    report(fd, "address_space", soft_and_hard(RLIMIT_AS));
    report(fd, "file_size", soft_and_hard(RLIMIT_FSIZE));
    report(fd, "processes", soft_and_hard(RLIMIT_NPROC));
    report(fd, "open_files", soft_and_hard(RLIMIT_NOFILE));
    report(fd, "core", soft_and_hard(RLIMIT_CORE));
  });
  CAPTURE(child.text);
  REQUIRE(child["applied"] == "ok");
  std::string six_gib = std::to_string(std::uint64_t{6} << 30);
  CHECK(child["address_space"] == six_gib + " " + six_gib);
  CHECK(child["file_size"] == "1048576 1048576");
  CHECK(child["processes"] == "77 77");
  CHECK(child["open_files"] == "100 100");
  CHECK(child["core"] == "0 0");
}

TEST_CASE("apply_limits refuses a memory limit below what the worker already holds, saying what to raise it to") {
  ChildReport child = in_child([](int fd) {
    report(fd, "address_space_before", soft_and_hard(RLIMIT_AS));
    for (bool gpu : {false, true}) {
      kcoral::SandboxConfig config;
      config.gpu = gpu;
      config.policy.memory_bytes = 1 << 20;
      auto status = entry::apply_limits(config);
      report(fd, gpu ? "gpu" : "cpu", status ? "ok" : status.error().message);
    }
    report(fd, "address_space", soft_and_hard(RLIMIT_AS));
  });
  CAPTURE(child.text);
  CHECK(child["cpu"].starts_with("--memory-limit-bytes is 1 MiB, but a worker already holds "));
  CHECK(child["cpu"].find("of address space (RLIMIT_AS)") != std::string::npos);
  CHECK(child["cpu"].find("raise it to at least ") != std::string::npos);
  CHECK(child["cpu"].find("which leaves 64 MiB for a program") != std::string::npos);
  CHECK(child["gpu"].find("of data segment (RLIMIT_DATA, on a GPU server)") != std::string::npos);
  CHECK(child["address_space"] == child["address_space_before"]);  // refused before anything was set
}

TEST_CASE("find_gpus gives the GPUs CUDA_VISIBLE_DEVICES names, in its order, and refuses one the driver does not list") {
  std::string pattern = (fs::temp_directory_path() / "kcoral-gpus-test-XXXXXX").string();
  REQUIRE(::mkdtemp(pattern.data()) != nullptr);
  fs::path driver = pattern;
  auto add_gpu = [&](const std::string& bus_id, const std::string& uuid, int minor) {
    fs::create_directories(driver / bus_id);
    std::ofstream(driver / bus_id / "information") << "Model: \t\t NVIDIA H200\nIRQ:   \t\t 16\nGPU UUID: \t\t " << uuid
                                                   << "\nVideo BIOS: \t\t ??.??.??.??.??\nDevice Minor: \t\t " << minor
                                                   << "\n";
  };
  add_gpu("0000:18:00.0", "GPU-aaaa", 0);
  add_gpu("0000:2a:00.0", "GPU-bbbb", 1);
  add_gpu("0000:3a:00.0", "GPU-cccc", 5);
  fs::create_directories(driver / "0000:4a:00.0");  // a directory without its information: no GPU

  auto two = entry::find_gpus("GPU-cccc,GPU-aaaa", driver.string());
  REQUIRE(two.has_value());
  REQUIRE(two->size() == 2);
  CHECK((*two)[0].minor == 5);
  CHECK((*two)[0].bus_id == "0000:3a:00.0");
  CHECK((*two)[1].minor == 0);
  CHECK((*two)[1].bus_id == "0000:18:00.0");

  auto one = entry::find_gpus("GPU-bbbb", driver.string());
  REQUIRE(one.has_value());
  REQUIRE(one->size() == 1);
  CHECK((*one)[0].minor == 1);

  auto none = entry::find_gpus("", driver.string());
  REQUIRE(none.has_value());
  CHECK(none->empty());

  auto unknown = entry::find_gpus("GPU-aaaa,GPU-dddd", driver.string());
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().message.find("GPU-dddd is not among the driver's GPUs") != std::string::npos);
  CHECK_FALSE(entry::find_gpus("GPU-aaaa", (driver / "missing").string()).has_value());
  fs::remove_all(driver);
}

}  // TEST_SUITE
