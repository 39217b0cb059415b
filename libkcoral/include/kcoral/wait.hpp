// kcoral::wait(condition, lock, done): what std::condition_variable::wait(lock, done) does.
//
// GCC 12's libstdc++ gave condition_variable::wait a new symbol version (GLIBCXX_3.4.30),
// which the libstdc++ of glibc-2.34 systems (RHEL 9) does not have; one call to it would
// keep the server's manylinux wheel off those systems. wait_until is inline, down to
// pthread_cond_clockwait, so the wait goes through it, an hour at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace kcoral {

template <class Done>
void wait(std::condition_variable& condition, std::unique_lock<std::mutex>& lock, Done done) {
  while (!condition.wait_until(lock, std::chrono::steady_clock::now() + std::chrono::hours(1), done)) {
  }
}

}  // namespace kcoral
