// Courier: a thread with its own descriptor table, relaying messages in memory.
#include "courier.hpp"

#include "descriptor_table.hpp"
#include "kcoral/wait.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kcoral {
namespace {

// Opens, in the calling thread's table, what descriptor `fd` of thread `tid` refers to.
Result<UniqueFd> reopen(pid_t tid, int fd) {
  std::string path = "/proc/" + std::to_string(::getpid()) + "/task/" + std::to_string(tid) + "/fd/" +
                     std::to_string(fd);
  UniqueFd reopened(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!reopened) return system_error("reopening " + path);
  return reopened;
}

}  // namespace

Result<std::unique_ptr<Courier>> Courier::start(UniqueFd channel) {
  std::unique_ptr<Courier> courier(new Courier());
  courier->wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!courier->wake_) return system_error("eventfd");
  int channel_fd = channel.get();
  courier->thread_ = std::thread([raw = courier.get(), channel = std::move(channel)]() mutable {
    raw->loop(std::move(channel));
  });
  std::unique_lock lock(courier->mutex_);
  kcoral::wait(courier->changed_, lock, [&] { return courier->ready_; });
  if (!courier->started_) {
    lock.unlock();
    auto error = courier->started_.error();
    return std::unexpected(error);
  }
  lock.unlock();
  // The thread has its own copy of the channel now; this table's goes.
  ::close(channel_fd);
  return courier;
}

Courier::~Courier() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
}

void Courier::loop(UniqueFd channel_fd) {
  // No signal handler runs on this thread: a program's own (installed with ctypes), sent
  // here with tgkill, would run with this thread's descriptor table, the channel in it.
  // (The program can still patch what this thread runs: the front trusts nothing it says.)
  sigset_t all;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
  // From here on this thread's table is its own; keep only the channel and the eventfd.
  Status started;
  if (::unshare(CLONE_FILES) != 0) {
    started = system_error("unshare(CLONE_FILES)");
  } else {
    int a = channel_fd.get(), b = wake_.get();
    close_descriptors_except({a, b});
  }
  {
    std::lock_guard lock(mutex_);
    tid_ = static_cast<pid_t>(::syscall(SYS_gettid));
    started_ = started;
    ready_ = true;
  }
  changed_.notify_all();
  if (!started) {
    (void)channel_fd.release();  // closed in the shared table by start()
    return;
  }
  ::fcntl(channel_fd.get(), F_SETFL, O_NONBLOCK);  // read until empty, then poll again
  Channel channel(std::move(channel_fd));
  bool open = true;
  while (true) {
    // A closed channel leaves the poll: its hang-up would be reported at once on every call,
    // whatever the events asked, and the thread would spin until the process exits.
    pollfd fds[2] = {{wake_.get(), POLLIN, 0}, {open ? channel.fd() : -1, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    std::uint64_t count;
    while (::read(wake_.get(), &count, sizeof count) > 0) {
    }
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      for (int fd : to_close_) ::close(fd);
      to_close_.clear();
    }
    send_waiting(channel);
    if (open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) open = receive_waiting(channel);
  }
  // This table, with its copy of the eventfd, goes when the thread ends.
}

void Courier::send_waiting(const Channel& channel) {
  while (true) {
    Outgoing* next;
    {
      std::lock_guard lock(mutex_);
      if (outgoing_.empty()) return;
      next = outgoing_.front();
      outgoing_.pop_front();
    }
    Status status;
    std::vector<UniqueFd> reopened;
    std::vector<int> numbers;
    for (int fd : next->fds) {
      auto copy = reopen(::getpid(), fd);  // the shared table is the main thread's, the leader's
      if (!copy) {
        status = std::unexpected(copy.error());
        break;
      }
      numbers.push_back(copy->get());
      reopened.push_back(std::move(*copy));
    }
    if (status) status = messages::send(channel, *next->message, numbers);
    {
      std::lock_guard lock(mutex_);
      next->status = status;
    }
    changed_.notify_all();
  }
}

bool Courier::receive_waiting(const Channel& channel) {
  while (true) {
    auto received = messages::receive(channel);
    Incoming incoming;
    if (!received) {
      incoming.error = received.error();
    } else if (!*received) {
      return true;  // nothing more for now
    } else {
      incoming.message = std::move((*received)->message);
      for (UniqueFd& fd : (*received)->fds) incoming.fds.push_back(fd.release());
    }
    bool failed = !incoming.message;
    {
      std::lock_guard lock(mutex_);
      incoming_.push_back(std::move(incoming));
    }
    changed_.notify_all();
    if (failed) return false;
  }
}

Status Courier::send(const messages::Message& message, std::vector<int> fds) {
  Outgoing outgoing{&message, std::move(fds), std::nullopt};
  std::unique_lock lock(mutex_);
  if (stopping_) return fail(ErrorKind::engine, "the courier has stopped");
  outgoing_.push_back(&outgoing);
  wake();
  kcoral::wait(changed_, lock, [&] { return outgoing.status.has_value(); });
  return *outgoing.status;
}

void Courier::wake() {
  std::uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof one) < 0) {
    // The counter is full: the courier has wake-ups pending already.
  }
}

Result<messages::Received> Courier::receive() {
  std::unique_lock lock(mutex_);
  kcoral::wait(changed_, lock, [&] { return !incoming_.empty(); });
  // A failure stays queued: every later call fails the same way.
  if (!incoming_.front().message) return std::unexpected(incoming_.front().error);
  Incoming incoming = std::move(incoming_.front());
  incoming_.pop_front();
  pid_t tid = tid_;
  lock.unlock();
  messages::Received received{std::move(*incoming.message), {}};
  Status reopened_all;
  for (int fd : incoming.fds) {
    auto copy = reopen(tid, fd);
    if (!copy && reopened_all) reopened_all = std::unexpected(copy.error());
    if (copy) received.fds.push_back(std::move(*copy));
  }
  lock.lock();
  to_close_.insert(to_close_.end(), incoming.fds.begin(), incoming.fds.end());
  lock.unlock();
  wake();
  if (!reopened_all) return std::unexpected(reopened_all.error());
  return received;
}

}  // namespace kcoral
