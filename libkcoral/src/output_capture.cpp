// Descriptor-level capture through pipes, drained by one poll() thread.
#include "output_capture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kcoral {

Result<std::unique_ptr<OutputCapture>> OutputCapture::start(std::uint64_t limit_bytes) {
  std::unique_ptr<OutputCapture> capture(new OutputCapture(limit_bytes));
  if (limit_bytes == 0) return capture;
  std::fflush(stdout);
  std::fflush(stderr);
  UniqueFd write_ends[2];
  for (int i = 0; i < 2; ++i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      return fail(ErrorKind::engine, std::string("cannot capture output: pipe2: ") + std::strerror(errno));
    capture->read_[i].reset(fds[0]);
    write_ends[i].reset(fds[1]);
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
    ::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);  // fewer stalls for chatty programs; best effort
    capture->saved_[i].reset(::fcntl(i + 1, F_DUPFD_CLOEXEC, 3));
    if (!capture->saved_[i])
      return fail(ErrorKind::engine, std::string("cannot capture output: dup: ") + std::strerror(errno));
  }
  capture->stop_.reset(::eventfd(0, EFD_CLOEXEC));
  if (!capture->stop_)
    return fail(ErrorKind::engine, std::string("cannot capture output: eventfd: ") + std::strerror(errno));
  for (int i = 0; i < 2; ++i) ::dup2(write_ends[i].get(), i + 1);
  capture->active_ = true;
  capture->thread_ = std::thread([raw = capture.get()] { raw->drain(); });
  return capture;
}

OutputCapture::~OutputCapture() {
  if (active_) finish();
}

void OutputCapture::drain() {
  char buffer[65536];
  bool stopping = false;
  bool open[2] = {true, true};
  while (open[0] || open[1]) {
    pollfd fds[3] = {{read_[0].get(), POLLIN, 0}, {read_[1].get(), POLLIN, 0},
                     {stop_.get(), POLLIN, 0}};
    if (!open[0]) fds[0].fd = -1;
    if (!open[1]) fds[1].fd = -1;
    // Once asked to stop, take what is already in the pipes and no more: a process the
    // program left behind may keep a write end open forever.
    int ready = ::poll(fds, stopping ? 2 : 3, stopping ? 0 : -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    if (!stopping && (fds[2].revents & POLLIN)) stopping = true;
    for (int i = 0; i < 2; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(read_[i].get(), buffer, sizeof buffer);
      if (n > 0) {
        RawCapture& out = captured_[i];
        std::uint64_t room = limit_bytes_ - std::min<std::uint64_t>(limit_bytes_, out.bytes.size());
        out.bytes.append(buffer, std::min<std::uint64_t>(room, static_cast<std::uint64_t>(n)));
        if (static_cast<std::uint64_t>(n) > room) out.truncated = true;
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        open[i] = false;
      }
    }
  }
}

std::pair<RawCapture, RawCapture> OutputCapture::finish() {
  if (!active_) return {};
  active_ = false;
  std::fflush(stdout);
  std::fflush(stderr);
  for (int i = 0; i < 2; ++i) ::dup2(saved_[i].get(), i + 1);
  std::uint64_t one = 1;
  (void)!::write(stop_.get(), &one, sizeof one);
  thread_.join();
  return {std::move(captured_[0]), std::move(captured_[1])};
}

}  // namespace kcoral
