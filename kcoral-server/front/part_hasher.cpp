// PartHasher: a thread that follows the session's writes with MultipartDigests.
#include "part_hasher.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

#include "kcoral/wait.hpp"

namespace kcoral {

struct PartHasher::State {
  State(const char* view, std::size_t length, std::string_view content_type)
      : view(view), length(length), digests(content_type) {}

  const char* const view;  // the file's first `length` bytes, read-only: the thread's
  const std::size_t length;
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t written = 0;  // guarded by mutex
  bool finishing = false;   // guarded by mutex
  bool abandoned = false;   // guarded by mutex
  bool finished = false;    // guarded by mutex
  MultipartDigests digests;  // the thread's until `finished`, then the session's

  void run() {
    std::unique_lock lock(mutex);
    std::size_t hashed = 0;
    while (true) {
      wait(changed, lock, [&] { return abandoned || written > hashed || finishing; });
      if (abandoned) return;
      if (written > hashed) {
        hashed = written;
        lock.unlock();
        digests.advance({view, hashed});
        lock.lock();
        continue;
      }
      finished = true;  // finishing, and all written is hashed
      changed.notify_all();
      return;
    }
  }
};

std::unique_ptr<PartHasher> PartHasher::start(int fd, std::size_t length, std::string_view content_type) {
  if (fd < 0 || length == 0) return nullptr;
  // A descriptor of its own, read-only: a shared mapping of a writable one would keep the
  // file from being sealed (F_SEAL_WRITE is refused while one exists).
  int readable = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC);
  if (readable < 0) return nullptr;
  void* view = ::mmap(nullptr, length, PROT_READ, MAP_SHARED, readable, 0);
  ::close(readable);
  if (view == MAP_FAILED) return nullptr;
  std::shared_ptr<State> state;
  try {
    state = std::make_shared<State>(static_cast<const char*>(view), length, content_type);
  } catch (const std::bad_alloc&) {
    ::munmap(view, length);
    return nullptr;
  }
  try {
    // The state lives as long as either side; the view, until the thread is done with it:
    // it unmaps it itself, so the session never waits for that.
    std::thread([state] {
      state->run();
      ::munmap(const_cast<char*>(state->view), state->length);
    }).detach();
  } catch (const std::system_error&) {
    ::munmap(view, length);
    return nullptr;
  }
  return std::unique_ptr<PartHasher>(new PartHasher(std::move(state)));
}

PartHasher::~PartHasher() {
  std::lock_guard lock(state_->mutex);
  if (state_->finished) return;
  state_->abandoned = true;
  state_->changed.notify_all();
}

void PartHasher::written(std::size_t size) {
  std::lock_guard lock(state_->mutex);
  state_->written = std::min(size, state_->length);
  state_->changed.notify_all();
}

MultipartDigests PartHasher::finish() {
  std::unique_lock lock(state_->mutex);
  state_->finishing = true;
  state_->changed.notify_all();
  wait(state_->changed, lock, [&] { return state_->finished; });
  return std::move(state_->digests);
}

}  // namespace kcoral
