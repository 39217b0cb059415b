// Courier (kcoral-server/worker/courier.cpp): once started, the channel is in no
// descriptor of the table the rest of the process shares, and cannot be reached through
// /proc either (a socket does not reopen); messages go both ways with their descriptors,
// which cross the tables by being reopened; a closed front is an error for receive.
#include <doctest/doctest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "courier.hpp"

namespace messages = kcoral::messages;

namespace {

std::string contents(int fd) {
  std::string out(64, '\0');
  ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}

kcoral::UniqueFd memfd_with(std::string_view data) {
  kcoral::UniqueFd fd(::memfd_create("courier-test", MFD_CLOEXEC));
  REQUIRE(::write(fd.get(), data.data(), data.size()) == static_cast<ssize_t>(data.size()));
  return fd;
}

// Every descriptor of every thread of this process that refers to the inode `socket`,
// found through /proc, and every attempt to open one of them anew that worked.
std::vector<std::string> ways_to(ino_t socket) {
  std::vector<std::string> found;
  std::string tasks = "/proc/self/task";
  DIR* task_dir = ::opendir(tasks.c_str());
  REQUIRE(task_dir != nullptr);
  while (dirent* task = ::readdir(task_dir)) {
    if (task->d_name[0] == '.') continue;
    std::string fd_dir_path = tasks + "/" + task->d_name + "/fd";
    DIR* fd_dir = ::opendir(fd_dir_path.c_str());
    if (fd_dir == nullptr) continue;
    while (dirent* entry = ::readdir(fd_dir)) {
      if (entry->d_name[0] == '.') continue;
      std::string path = fd_dir_path + "/" + entry->d_name;
      struct stat info {};
      if (::stat(path.c_str(), &info) == 0 && info.st_ino == socket) {
        found.push_back("listed at " + path);
        int reopened = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (reopened >= 0) {
          found.push_back("reopened through " + path);
          ::close(reopened);
        }
      }
    }
    ::closedir(fd_dir);
  }
  ::closedir(task_dir);
  return found;
}

struct Started {
  kcoral::Channel front;
  std::unique_ptr<kcoral::Courier> courier;
  int channel_number = -1;
  ino_t channel_inode = 0;
};

Started start() {
  auto pair = kcoral::Channel::socket_pair();
  REQUIRE(pair.has_value());
  Started started;
  started.channel_number = pair->second.get();
  struct stat info {};
  REQUIRE(::fstat(started.channel_number, &info) == 0);
  started.channel_inode = info.st_ino;
  started.front = kcoral::Channel(std::move(pair->first));
  auto courier = kcoral::Courier::start(std::move(pair->second));
  REQUIRE_MESSAGE(courier.has_value(), courier.error().message);
  started.courier = std::move(*courier);
  return started;
}

}  // namespace

TEST_SUITE("courier") {

TEST_CASE("the channel is gone from the shared table and only the courier's own table lists it") {
  Started s = start();
  CHECK(::fcntl(s.channel_number, F_GETFD) == -1);
  std::vector<std::string> ways = ways_to(s.channel_inode);
  // The courier thread's table lists it (under /proc/self/task/<courier>/fd); nothing
  // can open it from there.
  REQUIRE(ways.size() == 1);
  CHECK(ways[0].find("listed at /proc/self/task/") == 0);
  CHECK(ways[0].find("/proc/self/task/" + std::to_string(::getpid()) + "/") == std::string::npos);
}

TEST_CASE("a descriptor opened after the start is not the channel's, even at its old number") {
  Started s = start();
  kcoral::UniqueFd reused(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  CHECK(reused.get() == s.channel_number);
  CHECK(s.courier->send(messages::Ready{}).has_value());
  auto received = messages::receive(s.front);
  REQUIRE(received.has_value());
  CHECK(std::holds_alternative<messages::Ready>((*received)->message));
}

TEST_CASE("messages go both ways with their descriptors, reopened across the tables") {
  Started s = start();
  auto blob = memfd_with("blob bytes");
  int blob_fd = blob.get();
  REQUIRE(messages::send(s.front, messages::Blobs{{"digest"}, {0}, {0}, {10}, 1}, std::span<const int>(&blob_fd, 1)).has_value());
  REQUIRE(messages::send(s.front, messages::LeaseGranted{}).has_value());
  auto blobs = s.courier->receive();
  REQUIRE_MESSAGE(blobs.has_value(), blobs.error().message);
  REQUIRE(std::holds_alternative<messages::Blobs>(blobs->message));
  REQUIRE(blobs->fds.size() == 1);
  CHECK(contents(blobs->fds[0].get()) == "blob bytes");
  auto granted = s.courier->receive();
  REQUIRE(granted.has_value());
  CHECK(std::holds_alternative<messages::LeaseGranted>(granted->message));

  auto parts = memfd_with("parts");
  messages::RunResult result;
  result.part_sizes = {5};
  REQUIRE(s.courier->send(result, {parts.get()}).has_value());
  auto received = messages::receive(s.front);
  REQUIRE(received.has_value());
  REQUIRE((*received)->fds.size() == 1);
  CHECK(contents((*received)->fds[0].get()) == "parts");
}

TEST_CASE("sends from many threads each arrive once") {
  Started s = start();
  std::atomic<int> failed_sends{0};
  int received_count = 0;
  std::thread reader([&] {
    for (int i = 0; i < 400; ++i) {
      auto received = messages::receive(s.front);  // a blocking socket: waits for each
      if (!received || !*received) break;
      ++received_count;
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i)
        if (!s.courier->send(messages::GpuAccess{})) ++failed_sends;
    });
  for (auto& thread : threads) thread.join();
  reader.join();
  CHECK(failed_sends == 0);
  CHECK(received_count == 400);
}

TEST_CASE("once the front closes the channel, receive fails, and keeps failing") {
  Started s = start();
  s.front = kcoral::Channel();
  CHECK(!s.courier->receive().has_value());
  CHECK(!s.courier->receive().has_value());
  CHECK(!s.courier->send(messages::Ready{}).has_value());
}

TEST_CASE("once the front closes the channel, the courier waits without spinning") {
  // A worker goes on after its last answer (it exits, a reused one is retired): its
  // courier must not poll the hung-up channel over and over meanwhile.
  Started s = start();
  s.front = kcoral::Channel();
  CHECK(!s.courier->receive().has_value());  // the courier has seen the hang-up
  timespec before{}, after{};
  REQUIRE(::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &before) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE(::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &after) == 0);
  double cpu_ms = (after.tv_sec - before.tv_sec) * 1e3 + (after.tv_nsec - before.tv_nsec) / 1e6;
  CHECK_MESSAGE(cpu_ms < 30, "the courier used " << cpu_ms << " ms of CPU in 300 ms");
  CHECK(!s.courier->send(messages::Ready{}).has_value());  // and still answers
}

}  // TEST_SUITE
