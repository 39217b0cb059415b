// HeldThreadPool: a one-thread pool held busy until release(), standing in for the front's
// long-step threads: what the code under test hands it waits, so a test sees what goes on
// meanwhile, and then that the step ends.
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <future>

namespace kcoral::test {

class HeldThreadPool {
 public:
  HeldThreadPool() {
    boost::asio::post(threads, [released = released_] { released.wait(); });
  }
  HeldThreadPool(const HeldThreadPool&) = delete;
  HeldThreadPool& operator=(const HeldThreadPool&) = delete;
  ~HeldThreadPool() { release(); }  // then the pool joins its thread

  void release() {
    if (!released_now_) release_.set_value();
    released_now_ = true;
  }

  boost::asio::thread_pool threads{1};

 private:
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
  bool released_now_ = false;
};

}  // namespace kcoral::test
