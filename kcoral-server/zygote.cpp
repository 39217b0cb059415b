// Zygote: posix_spawn with the control channel as descriptor 3, then an async read loop.
#include "zygote.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/bind_executor.hpp>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

extern char** environ;

namespace kcoral {

using Json = nlohmann::json;

Zygote::Zygote(Strand strand, ZygoteConfig config, Callbacks callbacks)
    : strand_(strand), config_(std::move(config)), callbacks_(std::move(callbacks)), readable_(strand) {}

Zygote::~Zygote() { stop(); }

Status Zygote::start() {
  auto pair = Channel::socket_pair();
  if (!pair) return std::unexpected(pair.error());
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pair->second.get(), 3);  // dup2 clears CLOEXEC
  std::vector<std::string> args{config_.worker_path, "--control-fd", "3", "--device", config_.device,
                                "--work-root", config_.work_root, "--programs-per-worker",
                                std::to_string(config_.programs_per_worker)};
  if (config_.cuda_connections > 0) {
    args.push_back("--cuda-connections");
    args.push_back(std::to_string(config_.cuda_connections));
  }
  if (!config_.python.empty()) {
    args.push_back("--python");
    args.push_back(config_.python);
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // The front ignores SIGPIPE; user programs must not inherit that (nor its signal mask).
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setsigmask(&attributes, &empty);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  int rc = ::posix_spawn(&pid_, config_.worker_path.c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return fail(ErrorKind::engine, "cannot start " + config_.worker_path + ": " + std::strerror(rc));
  channel_ = Channel(std::move(pair->first));
  ::fcntl(channel_.fd(), F_SETFL, O_NONBLOCK);
  readable_.assign(::fcntl(channel_.fd(), F_DUPFD_CLOEXEC, 3));
  wait_readable();
  return {};
}

void Zygote::request_fork(const std::string& visible_devices) {
  Json request{{"type", "fork"}, {"visible_devices", visible_devices}};
  if (channel_.valid() && !channel_.send(request.dump())) lost("the worker parent stopped answering");
}

void Zygote::stop() {
  if (pid_ <= 0) return;
  boost::system::error_code ignored;
  readable_.close(ignored);
  channel_ = Channel();  // the zygote exits on the closed channel, killing its children
  bool reaped = false;
  for (int i = 0; i < 300 && !reaped; ++i) {
    reaped = ::waitpid(pid_, nullptr, WNOHANG) != 0;
    if (i == 100) ::kill(pid_, SIGTERM);
    if (!reaped) ::usleep(10000);
  }
  if (!reaped) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
}

void Zygote::wait_readable() {
  readable_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                       boost::asio::bind_executor(strand_, [this](boost::system::error_code ec) {
                         if (ec) return;  // cancelled by stop()
                         read_messages();
                       }));
}

void Zygote::read_messages() {
  while (channel_.valid()) {
    auto message = channel_.receive();
    if (!message) {
      lost(is_closed(message.error()) ? "the worker parent exited" : message.error().message);
      return;
    }
    if (!*message) break;
    handle(std::move(**message));
  }
  if (channel_.valid()) wait_readable();
}

void Zygote::handle(Message message) {
  Json json = Json::parse(message.json, nullptr, false);
  std::string type = json.is_object() ? json.value("type", "") : "";
  if (type == "ready") {
    std::map<std::string, std::string> versions;
    for (const auto& [name, version] : json["versions"].items())
      if (version.is_string()) versions[name] = version.get<std::string>();
    callbacks_.on_ready(std::move(versions));
  } else if (type == "forked" && !message.fds.empty()) {
    callbacks_.on_forked(json.value("pid", -1), std::move(message.fds.front()));
  } else if (type == "exited") {
    std::string how = json.contains("signal") ? "killed by signal " + std::to_string(json.value("signal", 0))
                                              : "exit code " + std::to_string(json.value("exit_code", 0));
    callbacks_.on_exited(json.value("pid", -1), how);
  } else if (type == "error") {
    callbacks_.on_failed(json.value("message", "unknown error"));
  }
}

void Zygote::lost(const std::string& why) {
  boost::system::error_code ignored;
  readable_.close(ignored);
  channel_ = Channel();
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  callbacks_.on_failed(why);
}

}  // namespace kcoral
