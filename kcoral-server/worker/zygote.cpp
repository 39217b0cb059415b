// Zygote: fork on request, reap and report, clean up after workers.
#define PY_SSIZE_T_CLEAN
#include "zygote.hpp"

#include <Python.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "courier.hpp"
#include "kcoral/remove_tree.hpp"
#include "messages.hpp"
#include "process_tree.hpp"
#include "program_process.hpp"

namespace kcoral {
namespace {

// os.environ[name] = value (which also sets the C environment). Needs the GIL.
void set_environment(const char* name, const std::string& value) {
  PyObject* os = PyImport_ImportModule("os");
  PyObject* environ_map = os != nullptr ? PyObject_GetAttrString(os, "environ") : nullptr;
  PyObject* text = PyUnicode_FromString(value.c_str());
  if (environ_map == nullptr || text == nullptr || PyMapping_SetItemString(environ_map, name, text) != 0) {
    PyErr_Clear();
    ::setenv(name, value.c_str(), 1);
  }
  Py_XDECREF(text);
  Py_XDECREF(environ_map);
  Py_XDECREF(os);
}

}  // namespace

int Zygote::serve(int signal_fd) {
  while (true) {
    pollfd fds[2] = {{control_.fd(), POLLIN, 0}, {signal_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      bool stop = false;
      while (::read(signal_fd, &info, sizeof info) == sizeof info) stop = stop || info.ssi_signo != SIGCHLD;
      reap();
      if (stop) break;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      auto received = wire::receive(control_);
      if (!received) break;  // the front is gone (or speaks nonsense)
      if (*received)
        if (auto* fork = std::get_if<wire::Fork>(&(*received)->message)) fork_worker(signal_fd, fork->visible_devices);
    }
  }
  for (pid_t pid : workers_) ::kill(pid, SIGKILL);
  kill_descendants();
  for (pid_t pid : workers_) remove_tree(worker_root(pid));
  return 0;
}

std::string Zygote::worker_root(pid_t pid) const { return options_.work_root + "/" + std::to_string(pid); }

void Zygote::fork_worker(int signal_fd, const std::string& visible_devices) {
  auto pair = Channel::socket_pair();
  if (!pair) return report_error(pair.error().message);
  PyGILState_STATE gil = PyGILState_Ensure();
  PyOS_BeforeFork();
  pid_t pid = ::fork();
  if (pid == 0) {
    PyOS_AfterFork_Child();
    // Pinned to its GPU by UUID before anything in it can touch CUDA; through
    // os.environ, so that programs see the same value CUDA does.
    if (!visible_devices.empty()) set_environment("CUDA_VISIBLE_DEVICES", visible_devices);
    if (options_.cuda_connections > 0)
      set_environment("CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(options_.cuda_connections));
    PyGILState_Release(gil);
    ::close(signal_fd);
    (void)control_.release_socket();  // closed: only the zygote may hold the front's line
    pair->first.reset();
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::setsid();  // its own process group: the front kills the whole group on timeout
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    become_subreaper();
    auto courier = Courier::start(std::move(pair->second));
    if (!courier) ::_exit(1);
    ProgramProcessOptions process{worker_root(::getpid()), options_.device == "gpu", options_.programs_per_worker};
    ::_exit(serve_programs(executor_, **courier, process));
  }
  PyOS_AfterFork_Parent();
  PyGILState_Release(gil);
  if (pid < 0) return report_error(std::string("fork failed: ") + std::strerror(errno));
  workers_.insert(pid);
  int channel = pair->first.get();
  (void)wire::send(control_, wire::Forked{pid}, std::span<const int>(&channel, 1));
}

void Zygote::reap() {
  bool any = false;
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    if (workers_.erase(pid) == 0) continue;  // an orphan we adopted
    any = true;
    remove_tree(worker_root(pid));
    wire::Exited exited{pid, std::nullopt, std::nullopt};
    if (WIFEXITED(status)) exited.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) exited.signal = WTERMSIG(status);
    (void)wire::send(control_, exited);
  }
  // Whatever a dead worker left running was handed to us; nothing of it may live on.
  if (any) kill_descendants(std::vector<pid_t>(workers_.begin(), workers_.end()));
}

void Zygote::report_error(const std::string& message) { (void)wire::send(control_, wire::ZygoteFailed{message}); }

}  // namespace kcoral
