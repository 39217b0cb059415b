// PoolWorker: deadline arithmetic and killing.
#include "pool_worker.hpp"

#include <fcntl.h>
#include <signal.h>

namespace kcoral {

PoolWorker::PoolWorker(Strand strand, pid_t pid, std::size_t group, UniqueFd socket)
    : pid(pid), group(group), channel(std::move(socket)), readable(strand), grace(strand), deadline_(strand) {
  ::fcntl(channel.fd(), F_SETFL, O_NONBLOCK);
  readable.assign(::fcntl(channel.fd(), F_DUPFD_CLOEXEC, 3));
}

void PoolWorker::start_deadline(double timeout_seconds, std::function<void()> expired) {
  expired_ = std::move(expired);
  paused_remaining_.reset();
  arm(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds)));
}

void PoolWorker::pause_deadline() {
  if (paused_remaining_ || !expired_) return;
  paused_remaining_ = std::max(Clock::duration::zero(), deadline_at_ - Clock::now());
  deadline_.cancel();
}

void PoolWorker::resume_deadline() {
  if (!paused_remaining_) return;
  Clock::duration remaining = *paused_remaining_;
  paused_remaining_.reset();
  arm(remaining);
}

void PoolWorker::cancel_timers() {
  expired_ = nullptr;
  paused_remaining_.reset();
  deadline_.cancel();
  grace.cancel();
}

void PoolWorker::kill_tree() const {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
}

void PoolWorker::arm(Clock::duration remaining) {
  deadline_at_ = Clock::now() + remaining;
  deadline_.expires_at(deadline_at_);
  deadline_.async_wait([this](boost::system::error_code ec) {
    // A cancelled wait (ec set, also when this worker is destroyed) or a re-armed one must
    // not fire the old expiry.
    if (ec || !expired_ || Clock::now() < deadline_at_) return;
    auto expired = std::move(expired_);
    expired_ = nullptr;
    expired();
  });
}

}  // namespace kcoral
