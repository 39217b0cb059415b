// GroupReclaimer: a forked copy of the worker parent on a socket pair of datagrams. Each
// request is the version ('1' or '2') and the group's directory; the answer is the
// request, echoed once the kernel has reclaimed what it could.
#include "group_reclaimer.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace kcoral {
namespace {

constexpr int kSocket = 3;              // the child's end, where it moves it
constexpr std::size_t kMessage = 4096;  // a request's most bytes: a version and a directory

// Writes `text` to the control file `directory`/`file`: what the kernel then does is the
// point, not whether it says it did all of it (memory.reclaim fails EAGAIN short of the
// amount asked).
void write_control(const char* directory, const char* file, const char* text) {
  char path[kMessage + 64];
  if (std::snprintf(path, sizeof path, "%s/%s", directory, file) >= static_cast<int>(sizeof path)) return;
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  if (::write(fd, text, std::strlen(text)) < 0) {
    // nothing to do about it: the next program's limit counts what stayed
  }
  ::close(fd);
}

// The child's whole life: system calls on stack buffers, nothing of the worker parent's
// it was copied from (its Python, its allocator's state) is touched.
[[noreturn]] void serve(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(0);
  ::prctl(PR_SET_NAME, "kcoral-reclaim");  // as ps and top show it
  ::close_range(kSocket + 1, ~0U, 0);
  char message[kMessage + 1];
  for (;;) {
    ssize_t size = ::recv(kSocket, message, kMessage, 0);
    if (size <= 0) ::_exit(0);
    message[size] = '\0';
    const char* directory = message + 1;
    if (message[0] == '1') {
      // cgroup v1, the group holding no process: reclaims as much as it can.
      write_control(directory, "memory.force_empty", "0");
    } else {
      // v2: as much as it holds.
      char current[32] = {};
      char path[kMessage + 64];
      std::snprintf(path, sizeof path, "%s/memory.current", directory);
      int fd = ::open(path, O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        ssize_t size = ::read(fd, current, sizeof current - 1);
        ::close(fd);
        unsigned long long bytes = size > 0 ? std::strtoull(current, nullptr, 10) : 0;
        char amount[32];
        std::snprintf(amount, sizeof amount, "%llu", bytes);
        if (bytes > 0) write_control(directory, "memory.reclaim", amount);
      }
    }
    if (::send(kSocket, message, static_cast<std::size_t>(size), MSG_NOSIGNAL) != size) ::_exit(0);
  }
}

}  // namespace

GroupReclaimer::GroupReclaimer(GroupReclaimer&& other) noexcept
    : socket_(std::move(other.socket_)), pidfd_(std::move(other.pidfd_)), pid_(std::exchange(other.pid_, -1)) {}

GroupReclaimer& GroupReclaimer::operator=(GroupReclaimer&& other) noexcept {
  if (this != &other) {
    stop();
    socket_ = std::move(other.socket_);
    pidfd_ = std::move(other.pidfd_);
    pid_ = std::exchange(other.pid_, -1);
  }
  return *this;
}

GroupReclaimer::~GroupReclaimer() { stop(); }

void GroupReclaimer::forget() {
  socket_.reset();
  pidfd_.reset();
  pid_ = -1;
}

void GroupReclaimer::stop() {
  socket_.reset();
  // By its pidfd, opened at its fork: the worker parent's reaping of every child may have
  // reaped it already, and its pid may name another process by now.
  if (pidfd_) {
    (void)::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    siginfo_t info;
    (void)::waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED);  // ECHILD once reaped
  }
  pidfd_.reset();
  pid_ = -1;
}

Status GroupReclaimer::start() {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return system_error("socketpair");
  UniqueFd ours(pair[0]), theirs(pair[1]);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return system_error("forking the control groups' reclaimer");
  if (pid == 0) {
    if (::dup2(theirs.get(), kSocket) != kSocket) ::_exit(1);
    serve(parent);
  }
  // This thread alone reaps children, so the child is not reaped before this.
  pidfd_ = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd_) {
    int error = errno;
    ::kill(pid, SIGKILL);  // reaped with the other children; its pid is not reused before that
    errno = error;
    return system_error("pidfd_open (Linux 5.3)");
  }
  socket_ = std::move(ours);
  pid_ = pid;
  return {};
}

Status GroupReclaimer::send(const std::string& directory, bool v1) {
  if (directory.size() + 1 > kMessage) return fail(ErrorKind::engine, "a control group's path too long: " + directory);
  if (!running()) KCORAL_TRY(start());
  std::string message = (v1 ? "1" : "2") + directory;
  if (::send(socket_.get(), message.data(), message.size(), MSG_NOSIGNAL | MSG_DONTWAIT) ==
      static_cast<ssize_t>(message.size()))
    return {};
  int error = errno;
  Status failed = system_error("asking the control groups' reclaimer");
  if (error != EAGAIN) stop();  // gone; a full socket only says it is behind
  return failed;
}

std::vector<std::string> GroupReclaimer::done() {
  std::vector<std::string> directories;
  char message[kMessage + 1];
  while (running()) {
    ssize_t size = ::recv(socket_.get(), message, kMessage, MSG_DONTWAIT);
    if (size > 1) {
      directories.emplace_back(message + 1, static_cast<std::size_t>(size - 1));
    } else if (size < 0 && (errno == EAGAIN || errno == EINTR)) {
      break;
    } else {
      stop();  // it ended (or said nothing a request said): what it had not answered is lost
    }
  }
  return directories;
}

}  // namespace kcoral
