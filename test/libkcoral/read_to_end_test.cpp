// read_to_end (kcoral/read_to_end.hpp): all a pipe gives until its writers close, across
// many reads and across a signal that interrupts a read (a handler installed without
// SA_RESTART, as a process that waits on its children may have).
#include <doctest/doctest.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "kcoral/read_to_end.hpp"
#include "kcoral/unique_fd.hpp"

namespace {

std::atomic<int> interruptions{0};
void count_interruption(int) { interruptions.fetch_add(1); }

}  // namespace

TEST_SUITE("read_to_end") {

TEST_CASE("a pipe's text whole, over many reads, once its writer closes") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  kcoral::UniqueFd read_end(fds[0]), write_end(fds[1]);
  std::string sent(1 << 20, '\0');
  for (std::size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>('a' + i % 26);
  std::thread writer([&] {
    for (std::size_t done = 0; done < sent.size();) {
      ssize_t n = ::write(write_end.get(), sent.data() + done, sent.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    write_end.reset();
  });
  std::string got = kcoral::read_to_end(read_end.get());
  writer.join();
  CHECK(got == sent);
}

TEST_CASE("a signal that interrupts a read does not cut the text short") {
  struct sigaction action {};
  action.sa_handler = count_interruption;  // no SA_RESTART: the read fails with EINTR
  struct sigaction before {};
  REQUIRE(::sigaction(SIGUSR1, &action, &before) == 0);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  kcoral::UniqueFd read_end(fds[0]), write_end(fds[1]);
  pthread_t reader = ::pthread_self();
  interruptions = 0;
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the reader blocks in read
    ::pthread_kill(reader, SIGUSR1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (void)!::write(write_end.get(), "after", 5);
    write_end.reset();
  });
  std::string got = kcoral::read_to_end(read_end.get());
  writer.join();
  ::sigaction(SIGUSR1, &before, nullptr);
  CHECK(interruptions == 1);
  CHECK(got == "after");
}

}  // TEST_SUITE
