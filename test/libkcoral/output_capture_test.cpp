// OutputCapture (libkcoral/src/output_capture.cpp): descriptors 1 and 2 redirected into
// pipes for the length of a capture, so native writes, C stdio and subprocesses are all
// caught; each stream is cut at the limit with a truncation flag; limit 0 leaves the
// descriptors alone; finish() restores them and does not wait for leftover processes.
#include <doctest/doctest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "output_capture.hpp"

using kcoral::OutputCapture;

namespace {

ino_t inode_of(int fd) {
  struct stat info {};
  ::fstat(fd, &info);
  return info.st_ino;
}

void write_fd(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

std::unique_ptr<OutputCapture> start(std::uint64_t limit) {
  auto capture = OutputCapture::start(limit);
  REQUIRE_MESSAGE(capture.has_value(), capture.error().message);
  return std::move(*capture);
}

}  // namespace

TEST_SUITE("output_capture") {

TEST_CASE("native writes to descriptors 1 and 2 are captured separately") {
  auto capture = start(1024);
  write_fd(1, "to stdout\n");
  write_fd(2, "to stderr\n");
  write_fd(1, "more");
  auto [out, err] = capture->finish();
  CHECK(out.bytes == "to stdout\nmore");
  CHECK(err.bytes == "to stderr\n");
  CHECK_FALSE(out.truncated);
  CHECK_FALSE(err.truncated);
}

TEST_CASE("C stdio buffered at finish is flushed into the capture") {
  auto capture = start(1024);
  std::printf("no newline yet");
  std::fprintf(stderr, "err");
  auto [out, err] = capture->finish();
  CHECK(out.bytes == "no newline yet");
  CHECK(err.bytes == "err");
}

TEST_CASE("output of a subprocess is captured") {
  auto capture = start(1024);
  int status = std::system("echo hi; echo oops >&2");
  auto [out, err] = capture->finish();
  CHECK(status == 0);
  CHECK(out.bytes == "hi\n");
  CHECK(err.bytes == "oops\n");
}

TEST_CASE("each stream is cut at the limit and flagged as truncated") {
  auto capture = start(10);
  write_fd(1, "0123456789abcdef");
  write_fd(2, "0123456789");  // exactly the limit: not truncated
  auto [out, err] = capture->finish();
  CHECK(out.bytes == "0123456789");
  CHECK(out.truncated);
  CHECK(err.bytes == "0123456789");
  CHECK_FALSE(err.truncated);
}

TEST_CASE("a stream far over the limit and over the pipe size neither blocks nor grows") {
  auto capture = start(1000);
  const std::string chunk(64 * 1024, 'x');
  for (int i = 0; i < 64; ++i) write_fd(1, chunk);  // 4 MiB
  auto [out, err] = capture->finish();
  CHECK(out.bytes.size() == 1000);
  CHECK(out.truncated);
  CHECK(err.bytes.empty());
}

TEST_CASE("a large stream within the limit arrives whole and in order") {
  auto capture = start(8u << 20);
  std::string expected;
  for (int i = 0; i < 200000; ++i) expected += std::to_string(i) + "\n";
  write_fd(1, expected);
  auto [out, err] = capture->finish();
  CHECK(out.bytes.size() == expected.size());
  CHECK(out.bytes == expected);
  CHECK_FALSE(out.truncated);
}

TEST_CASE("descriptors 1 and 2 point elsewhere during a capture and back after") {
  const ino_t stdout_before = inode_of(1);
  const ino_t stderr_before = inode_of(2);
  auto capture = start(16);
  const ino_t stdout_during = inode_of(1);
  const ino_t stderr_during = inode_of(2);
  (void)capture->finish();
  CHECK(stdout_during != stdout_before);
  CHECK(stderr_during != stderr_before);
  CHECK(stdout_during != stderr_during);
  CHECK(inode_of(1) == stdout_before);
  CHECK(inode_of(2) == stderr_before);
}

TEST_CASE("a limit of 0 captures nothing and leaves the descriptors alone") {
  const ino_t stdout_before = inode_of(1);
  auto capture = start(0);
  CHECK(inode_of(1) == stdout_before);
  auto [out, err] = capture->finish();
  CHECK(out.bytes.empty());
  CHECK_FALSE(out.truncated);
  CHECK(err.bytes.empty());
}

TEST_CASE("finish does not wait for a process that still holds the pipe") {
  auto capture = start(1024);
  int status = std::system("echo before; (sleep 3; echo late) >/dev/null 2>&1 & (sleep 3) &");
  auto started = std::chrono::steady_clock::now();
  auto [out, err] = capture->finish();
  auto waited = std::chrono::steady_clock::now() - started;
  CHECK(status == 0);
  CHECK(out.bytes == "before\n");
  CHECK(waited < std::chrono::seconds(2));
}

TEST_CASE("finish does not wait for a leftover process that keeps writing") {
  auto capture = start(1024);
  // `yes` inherits descriptor 1, the capture pipe, and writes to it without pause.
  pid_t writer = -1;
  char yes[] = "yes";
  char* argv[] = {yes, nullptr};
  REQUIRE(::posix_spawnp(&writer, "yes", nullptr, nullptr, argv, environ) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto finished = std::async(std::launch::async, [&] { return capture->finish(); });
  bool in_time = finished.wait_for(std::chrono::seconds(3)) == std::future_status::ready;
  ::kill(writer, SIGKILL);  // lets a stuck finish() end, so the suite goes on either way
  ::waitpid(writer, nullptr, 0);
  auto [out, err] = finished.get();
  CHECK(in_time);
  CHECK(out.bytes.size() == 1024);
  CHECK(out.truncated);
}

TEST_CASE("captures can follow one another, and the destructor finishes an active one") {
  { auto abandoned = start(8); write_fd(1, "dropped"); }
  auto capture = start(64);
  write_fd(1, "second");
  auto [out, err] = capture->finish();
  CHECK(out.bytes == "second");
  auto [again, again_err] = capture->finish();  // finishing twice returns nothing more
  CHECK(again.bytes.empty());
}

}  // TEST_SUITE
