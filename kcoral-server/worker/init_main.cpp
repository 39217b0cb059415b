// kcoral-init: the first process of a sandboxed worker's PID namespace.
//
// The zygote starts it (posix_spawn, right after making the namespace) and then forks the
// worker into the same namespace, so that the worker is an ordinary process rather than
// the namespace's init (an init ignores the signals it sends itself). kcoral-init reaps
// whatever ends below it, and ends when the zygote kills it after reaping the worker, or
// when its lifeline (descriptor 3, a pipe whose other end only the zygote holds) closes
// because the zygote is gone. Its end takes every process left in the namespace. It
// holds nothing but the lifeline: no other descriptor, no environment. Static and tiny,
// so that starting one costs a fraction of a millisecond.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

int main() {
  constexpr int kLifeline = 3;
  sigset_t child;
  sigemptyset(&child);
  sigaddset(&child, SIGCHLD);
  sigprocmask(SIG_BLOCK, &child, nullptr);
  int children = signalfd(-1, &child, SFD_CLOEXEC | SFD_NONBLOCK);
  if (children < 0) return 1;
  while (true) {
    pollfd watched[2] = {{kLifeline, POLLIN, 0}, {children, POLLIN, 0}};
    if (poll(watched, 2, -1) < 0) continue;
    if (watched[0].revents != 0) return 0;  // the zygote is gone
    signalfd_siginfo info;
    while (read(children, &info, sizeof info) == sizeof info) {
    }
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }
}
