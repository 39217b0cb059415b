// kcoral-worker: the prepared parent (zygote) and the per-program worker processes.
//
// The front starts one zygote. It starts Python once, imports the heavy modules, and
// then forks a fresh child for every program on the front's request, ahead of time: a
// child inherits a warm interpreter in milliseconds, runs exactly one program, kills
// whatever the program left running and exits, so no state of one program (working
// directory, modules, monkeypatches, environment, child processes) reaches the next.
// Each child talks to the front over its own channel, which the zygote hands over at
// fork time. The zygote reaps children, kills their orphans and removes their files.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "channel.hpp"
#include "kcoral/executor.hpp"
#include "kcoral/remove_tree.hpp"
#include "process_tree.hpp"
#include "worker_child.hpp"
#include "worker_protocol.hpp"

namespace {

using kcoral::Channel;
using Json = nlohmann::json;

struct Options {
  int control_fd = -1;
  std::string device = "cpu";
  std::string work_root;
  std::string python;
  std::size_t programs_per_worker = 1;
  int cuda_connections = 0;  // > 0: CUDA_DEVICE_MAX_CONNECTIONS of the children
};

void raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// The Python of the environment this binary was installed into (bin/kcoral-worker next
// to bin/python3), so a pip-installed server embeds its own virtual environment.
std::string python_beside_this_binary() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return {};
  std::string exe(path, static_cast<std::size_t>(n));
  std::string candidate = exe.substr(0, exe.rfind('/')) + "/python3";
  return ::access(candidate.c_str(), X_OK) == 0 ? candidate : std::string();
}

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

class Zygote {
 public:
  Zygote(Options options, kcoral::Executor& executor, Channel control)
      : options_(std::move(options)), executor_(executor), control_(std::move(control)) {}

  int serve(int signal_fd) {
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
        auto message = control_.receive();
        if (!message) break;  // the front is gone
        if (*message) {
          Json request = Json::parse((*message)->json, nullptr, false);
          if (request.is_object() && request.value("type", "") == "fork")
            fork_child(signal_fd, request.value("visible_devices", ""));
        }
      }
    }
    for (pid_t pid : children_) ::kill(pid, SIGKILL);
    kcoral::kill_descendants();
    for (pid_t pid : children_) kcoral::remove_tree(child_root(pid));
    return 0;
  }

 private:
  std::string child_root(pid_t pid) const { return options_.work_root + "/" + std::to_string(pid); }

  void fork_child(int signal_fd, const std::string& visible_devices) {
    auto pair = Channel::socket_pair();
    if (!pair) {
      report_error(pair.error().message);
      return;
    }
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
      kcoral::become_subreaper();
      Channel channel(std::move(pair->second));
      kcoral::WorkerChildOptions child{options_.work_root + "/" + std::to_string(::getpid()),
                                       options_.device == "gpu", options_.programs_per_worker};
      ::_exit(kcoral::serve_programs(executor_, channel, child));
    }
    PyOS_AfterFork_Parent();
    PyGILState_Release(gil);
    if (pid < 0) {
      report_error(std::string("fork failed: ") + std::strerror(errno));
      return;
    }
    children_.insert(pid);
    (void)control_.send(Json{{"type", "forked"}, {"pid", pid}}.dump(), {pair->first.get()});
  }

  void reap() {
    bool any = false;
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      if (children_.erase(pid) == 0) continue;  // an orphan we adopted
      any = true;
      kcoral::remove_tree(child_root(pid));
      Json exited{{"type", "exited"}, {"pid", pid}};
      if (WIFEXITED(status)) exited["exit_code"] = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) exited["signal"] = WTERMSIG(status);
      (void)control_.send(exited.dump());
    }
    // Whatever a dead worker left running was handed to us; nothing of it may live on.
    if (any) kcoral::kill_descendants(std::vector<pid_t>(children_.begin(), children_.end()));
  }

  void report_error(const std::string& message) {
    (void)control_.send(Json{{"type", "error"}, {"message", message}}.dump());
  }

  Options options_;
  kcoral::Executor& executor_;
  Channel control_;
  std::set<pid_t> children_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kcoral-worker: the worker processes of kcoral-server (started by it, not by hand)"};
  Options options;
  app.add_option("--control-fd", options.control_fd, "descriptor of the channel to the front")->required();
  app.add_option("--device", options.device, "cpu or gpu")->check(CLI::IsMember({"cpu", "gpu"}));
  app.add_option("--work-root", options.work_root, "where programs' working directories go")->required();
  app.add_option("--python", options.python, "the Python environment to embed");
  app.add_option("--programs-per-worker", options.programs_per_worker, "programs a child runs before exiting")
      ->check(CLI::PositiveNumber);
  app.add_option("--cuda-connections", options.cuda_connections, "CUDA_DEVICE_MAX_CONNECTIONS of the children")
      ->check(CLI::Range(0, 32));
  CLI11_PARSE(app, argc, argv);

  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the front
  raise_descriptor_limit();
  kcoral::become_subreaper();
  Channel control{kcoral::UniqueFd(options.control_fd)};

  if (options.python.empty()) options.python = python_beside_this_binary();
  // The heavy imports happen once, here, not in every child. A GPU parent imports torch
  // but makes no CUDA context: CUDA does not survive fork, each child makes its own.
  bool gpu = options.device == "gpu";
  std::vector<std::string> preload{"numpy"};
  if (gpu) preload.push_back("torch");
  auto executor = kcoral::Executor::create({options.python, options.work_root, preload, gpu});
  if (!executor) {
    (void)control.send(Json{{"type", "error"}, {"message", executor.error().message}}.dump());
    return 1;
  }
  Json versions = (*executor)->versions();
  (*executor)->prepare_for_fork();
  (void)control.send(Json{{"type", "ready"}, {"versions", versions}}.dump());

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);  // handled in the loop: children and their orphans go first
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  int signal_fd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  return Zygote(options, **executor, std::move(control)).serve(signal_fd);
}
