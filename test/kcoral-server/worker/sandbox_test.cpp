// Sandbox (kcoral-server/worker/sandbox.cpp): a zygote, played by a child of the test,
// prepares a sandbox and forks a worker into it with the real kcoral-init; the worker
// enters it and reports what it finds, the zygote what it saw outside. Checked, inside:
// the worker is the second process of a PID namespace of its own and sees no other; it is
// user 1000, mapped to one user of the configured range outside, with no capabilities,
// no_new_privs and the seccomp filter (clone3 answers ENOSYS); its host name, its network
// (a loopback alone), its /dev (the harmless nodes and links only), its /sys (no
// /sys/class); the system and the readable paths read-only, the rest of the host absent;
// a private scratch tmpfs of the configured size at /tmp, its working directory, HOME in
// it; only the descriptors kept, the standard streams on /dev/null; the process limits.
// Outside: its init is listed until reaped, and a process the worker leaves behind ends
// with the namespace when the zygote releases the worker. Also: the readable paths are
// kept canonical, without those under another or under the system's; a uid range holding
// root, or an init that cannot run, is refused; a disabled sandbox forks a plain child;
// what the limits description says. Tests that make namespaces are skipped, saying why,
// where the machine does not allow them.
#include <doctest/doctest.h>

#include <dirent.h>
#include <net/if.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "kcoral-server/worker/sandbox_support.hpp"
#include "sandbox.hpp"

using kcoral::test::ChildReport;
using kcoral::test::in_child;
using kcoral::test::report;

namespace {

namespace fs = std::filesystem;

// A scratch directory outside /tmp (which a sandbox's scratch space hides): the new root's
// mountpoint, a readable tree and a hidden one.
struct Layout {
  fs::path base;
  Layout() {
    std::string pattern = (fs::current_path() / "kcoral-sandbox-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    base = pattern;
    fs::create_directories(base / "readable" / "inner");
    std::ofstream(base / "readable" / "file") << "readable text";
    fs::permissions(base / "readable" / "file", fs::perms::all);  // only the mount stops a write
    fs::create_directories(base / "hidden");
    std::ofstream(base / "hidden" / "secret") << "secret";
  }
  ~Layout() {
    std::error_code ignored;
    fs::remove_all(base, ignored);
  }
  [[nodiscard]] kcoral::SandboxConfig config() const {
    kcoral::SandboxConfig config;
    config.cgroups = false;  // program_cgroups_test covers them; the host may not allow them
    config.root_mountpoint = (base / "root").string();
    config.init_path = KCORAL_INIT_PATH;
    config.policy.scratch_bytes = 16 << 20;
    config.policy.open_files = 64;
    config.policy.processes = 32;
    config.policy.file_size_bytes = 1 << 20;
    return config;
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The value of `field` in /proc/self/status.
std::string status_field(const std::string& field) {
  std::istringstream status(read_file("/proc/self/status"));
  for (std::string line; std::getline(status, line);)
    if (line.starts_with(field + ":")) return line.substr(line.find_first_not_of(" \t", field.size() + 1));
  return "";
}

// The entries of a directory, sorted, joined by spaces.
std::string listing(const std::string& path, bool numeric_only = false) {
  std::set<std::string> names;
  if (DIR* directory = ::opendir(path.c_str())) {
    while (dirent* entry = ::readdir(directory)) {
      std::string name = entry->d_name;
      if (name == "." || name == "..") continue;
      if (numeric_only && name.find_first_not_of("0123456789") != std::string::npos) continue;
      names.insert(name);
    }
    ::closedir(directory);
  }
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : " ") + name;
  return joined;
}

// The descriptors open in this process (but the listing's own), in order, joined by spaces.
std::string open_descriptors() {
  std::vector<int> numbers;
  DIR* directory = ::opendir("/proc/self/fd");
  REQUIRE(directory != nullptr);
  while (dirent* entry = ::readdir(directory))
    if (entry->d_name[0] != '.' && std::atoi(entry->d_name) != ::dirfd(directory)) numbers.push_back(std::atoi(entry->d_name));
  ::closedir(directory);
  std::sort(numbers.begin(), numbers.end());
  std::string joined;
  for (int number : numbers) joined += (joined.empty() ? "" : " ") + std::to_string(number);
  return joined;
}

// errno's name after `call` failed, or "ok".
std::string outcome(int result) {
  if (result >= 0) return "ok";
  switch (errno) {
    case EROFS: return "EROFS";
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOSYS: return "ENOSYS";
    default: return std::to_string(errno);
  }
}

std::uint64_t soft_limit(int resource) {
  rlimit limit{};
  ::getrlimit(resource, &limit);
  return limit.rlim_cur;
}

// What a worker finds once it has entered its sandbox, on `fd`.
void report_inside(int fd, const Layout& layout, const std::string& scratch, const std::string& kept) {
  std::error_code ignored;
  report(fd, "entered", "ok");
  report(fd, "scratch", scratch);
  char cwd[4096] = {};
  report(fd, "cwd", ::getcwd(cwd, sizeof cwd) != nullptr ? cwd : "?");
  report(fd, "pid", std::to_string(::getpid()));
  report(fd, "processes", listing("/proc", true));
  report(fd, "uid", std::to_string(::getuid()) + " " + std::to_string(::geteuid()));
  report(fd, "gid", std::to_string(::getgid()));
  report(fd, "uid_map", read_file("/proc/self/uid_map"));
  report(fd, "capabilities", status_field("CapEff") + " " + status_field("CapPrm") + " " + status_field("CapBnd"));
  report(fd, "no_new_privs", status_field("NoNewPrivs"));
  report(fd, "seccomp", status_field("Seccomp"));
  report(fd, "clone3", outcome(static_cast<int>(::syscall(SYS_clone3, nullptr, 0))));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  report(fd, "hostname", host);
  std::string interfaces;
  if (struct if_nameindex* names = ::if_nameindex()) {
    for (struct if_nameindex* name = names; name->if_index != 0; ++name) interfaces += std::string(name->if_name) + " ";
    ::if_freenameindex(names);
  }
  report(fd, "interfaces", interfaces);
  report(fd, "dev", listing("/dev"));
  report(fd, "sys_class", outcome(::access("/sys/class", F_OK)));
  report(fd, "sys_cpu", outcome(::access("/sys/devices/system/cpu/online", R_OK)));
  std::string readable = (layout.base / "readable" / "file").string();
  report(fd, "readable_text", read_file(readable));
  report(fd, "readable_write", outcome(::open(readable.c_str(), O_WRONLY | O_CLOEXEC)));
  report(fd, "hidden", outcome(::access((layout.base / "hidden" / "secret").c_str(), F_OK)));
  report(fd, "usr_write", outcome(::open("/usr/kcoral-sandbox-test", O_WRONLY | O_CREAT | O_CLOEXEC, 0600)));
  report(fd, "root_write", outcome(::mkdir("/kcoral-sandbox-test", 0700)));
  int written = ::open("/tmp/written", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  report(fd, "tmp_write", outcome(written));
  if (written >= 0) ::close(written);
  report(fd, "home", outcome(::access("/tmp/home", W_OK)));
  struct statfs scratch_fs {};
  ::statfs("/tmp", &scratch_fs);
  report(fd, "tmp_is_tmpfs", scratch_fs.f_type == 0x01021994 ? "yes" : "no");  // TMPFS_MAGIC
  report(fd, "tmp_bytes", std::to_string(scratch_fs.f_blocks * static_cast<std::uint64_t>(scratch_fs.f_bsize)));
  report(fd, "stdin", fs::read_symlink("/proc/self/fd/0", ignored).string());
  report(fd, "descriptors", open_descriptors());
  report(fd, "kept", kept);
  report(fd, "open_files", std::to_string(soft_limit(RLIMIT_NOFILE)));
  report(fd, "processes_limit", std::to_string(soft_limit(RLIMIT_NPROC)));
  report(fd, "file_size", std::to_string(soft_limit(RLIMIT_FSIZE)));
  report(fd, "core", std::to_string(soft_limit(RLIMIT_CORE)));
  report(fd, "address_space", std::to_string(soft_limit(RLIMIT_AS)));
}

}  // namespace

TEST_SUITE("sandbox") {

TEST_CASE("a sandboxed worker finds only what the sandbox gives it, and what it leaves ends with it" *
          doctest::skip(!kcoral::test::sandbox_possible())) {
  Layout layout;
  kcoral::SandboxConfig config = layout.config();
  // Kept: the readable tree. Dropped: a path under it, one under the system's, a relative
  // one, a missing one.
  config.policy.readable_paths = {(layout.base / "readable").string(), (layout.base / "readable" / "inner").string(),
                           "/usr/share", "relative/path", (layout.base / "missing").string()};
  ChildReport zygote = in_child([&](int fd) {
    kcoral::Sandbox sandbox(config);
    if (auto prepared = sandbox.prepare_zygote(); !prepared) return report(fd, "prepared", prepared.error().message);
    report(fd, "prepared", "ok");
    int orphan[2];  // its write end outlives the worker only in the process the worker leaves
    if (::pipe2(orphan, O_CLOEXEC) != 0) return report(fd, "pipe", "failed");
    auto forked = sandbox.fork();
    if (!forked) return report(fd, "forked", forked.error().message);
    if (*forked == 0) {  // the worker
      auto entered = sandbox.enter({fd, orphan[1]}, "");
      if (!entered) {
        report(fd, "entered", entered.error().message);
        ::_exit(3);
      }
      std::vector<int> kept{0, 1, 2, fd, orphan[1]};
      std::sort(kept.begin(), kept.end());
      std::string kept_text;
      for (int number : kept) kept_text += (kept_text.empty() ? "" : " ") + std::to_string(number);
      report_inside(fd, layout, *entered, kept_text);
      if (::fork() == 0) {  // left behind, holding the pipe's write end
        ::close(fd);
        while (true) ::pause();
      }
      ::_exit(0);
    }
    pid_t worker = *forked;
    ::close(orphan[1]);
    sandbox.admit(worker);
    sandbox.continue_admission(worker, /*wait=*/true);
    std::vector<pid_t> inits = sandbox.inits();
    report(fd, "inits", std::to_string(inits.size()));
    int status = 0;
    ::waitpid(worker, &status, 0);
    report(fd, "worker_exit", std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1));
    report(fd, "out_of_memory", sandbox.release(worker) ? "yes" : "no");
    // The init is killed: the namespace, and what the worker left in it, end.
    pollfd orphan_end{orphan[0], POLLIN, 0};
    char byte;
    bool ended = ::poll(&orphan_end, 1, 10000) == 1 && ::read(orphan[0], &byte, 1) == 0;
    report(fd, "left_process_ended", ended ? "yes" : "no");
    for (pid_t init : inits) {
      ::waitpid(init, nullptr, 0);
      sandbox.reaped(init);
    }
    report(fd, "inits_after_reaping", std::to_string(sandbox.inits().size()));
    sandbox.end();
  });
  CAPTURE(zygote.text);
  REQUIRE(zygote["prepared"] == "ok");
  REQUIRE(zygote["entered"] == "ok");
  CHECK(zygote.exit_code == 0);

  // Its own PID namespace: kcoral-init first, the worker second, nothing else.
  CHECK(zygote["pid"] == "2");
  CHECK(zygote["processes"] == "1 2");
  // User 1000 inside, one user of the range outside; no capabilities, no way to gain any.
  CHECK(zygote["uid"] == "1000 1000");
  CHECK(zygote["gid"] == "1000");
  std::istringstream map(zygote["uid_map"]);
  std::uint64_t inside = 0, outside = 0, count = 0;
  map >> inside >> outside >> count;
  CHECK(inside == 1000);
  CHECK(count == 1);
  CHECK(outside >= config.policy.first_uid);
  CHECK(outside <= config.policy.last_uid);
  CHECK(zygote["capabilities"] == "0000000000000000 0000000000000000 0000000000000000");
  CHECK(zygote["no_new_privs"] == "1");
  CHECK(zygote["seccomp"] == "2");
  CHECK(zygote["clone3"] == "ENOSYS");  // the filter's answer, so that libc uses clone
  // Its own host name and network, a /dev of harmless nodes, a /sys without the network's.
  CHECK(zygote["hostname"] == "kcoral");
  CHECK(zygote["interfaces"] == "lo ");
  CHECK(zygote["dev"] == "fd full null random shm stderr stdin stdout urandom zero");
  CHECK(zygote["sys_class"] == "ENOENT");
  CHECK(zygote["sys_cpu"] == "ok");
  // The system and the readable paths read-only; the rest of the host absent.
  CHECK(zygote["readable_text"] == "readable text");
  CHECK(zygote["readable_write"] == "EROFS");
  CHECK(zygote["hidden"] == "ENOENT");
  CHECK(zygote["usr_write"] == "EROFS");
  CHECK(zygote["root_write"] == "EROFS");
  // The scratch space: a private tmpfs of the configured size, the working directory.
  CHECK(zygote["scratch"] == "/tmp");
  CHECK(zygote["cwd"] == "/tmp");
  CHECK(zygote["tmp_write"] == "ok");
  CHECK(zygote["home"] == "ok");
  CHECK(zygote["tmp_is_tmpfs"] == "yes");
  CHECK(zygote["tmp_bytes"] == std::to_string(config.policy.scratch_bytes));
  // Only the descriptors kept (the report and the pipe's end, and the standard streams on
  // /dev/null), and the limits.
  CHECK(zygote["stdin"] == "/dev/null");
  CHECK(zygote["descriptors"] == zygote["kept"]);
  CHECK(zygote["open_files"] == "64");
  CHECK(zygote["processes_limit"] == "32");
  CHECK(zygote["file_size"] == std::to_string(1 << 20));
  CHECK(zygote["core"] == "0");
  CHECK(zygote["address_space"] == std::to_string(config.policy.memory_bytes));
  // Outside: the init listed until it is reaped; what the worker left ended with it.
  CHECK(zygote["worker_exit"] == "0");
  CHECK(zygote["inits"] == "1");
  CHECK(zygote["out_of_memory"] == "no");
  CHECK(zygote["left_process_ended"] == "yes");
  CHECK(zygote["inits_after_reaping"] == "0");
}

TEST_CASE("workers forked one after another are admitted in whatever order they get there" *
          doctest::skip(!kcoral::test::sandbox_possible())) {
  Layout layout;
  ChildReport zygote = in_child([&](int fd) {
    kcoral::Sandbox sandbox(layout.config());
    if (auto prepared = sandbox.prepare_zygote(); !prepared) return report(fd, "prepared", prepared.error().message);
    std::vector<pid_t> workers;
    for (int i = 0; i < 3; ++i) {
      auto forked = sandbox.fork();
      if (!forked) return report(fd, "forked", forked.error().message);
      if (*forked == 0) {
        auto entered = sandbox.enter({fd}, "");
        report(fd, "worker" + std::to_string(i), entered ? "uid " + std::to_string(::getuid()) : entered.error().message);
        ::_exit(0);
      }
      sandbox.admit(*forked);  // the next one is forked before this one is admitted
      workers.push_back(*forked);
    }
    report(fd, "waiting", std::to_string(sandbox.admissions().size()));
    auto deadline = sandbox.admission_deadline();
    report(fd, "deadline_ahead_s", deadline ? std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                  *deadline - std::chrono::steady_clock::now()).count())
                                            : "none");
    for (auto worker = workers.rbegin(); worker != workers.rend(); ++worker)
      sandbox.continue_admission(*worker, /*wait=*/true);
    report(fd, "waiting_after", std::to_string(sandbox.admissions().size()));
    for (pid_t worker : workers) {
      ::waitpid(worker, nullptr, 0);
      sandbox.release(worker);
    }
  });
  CAPTURE(zygote.text);
  CHECK(zygote["waiting"] == "3");
  CHECK((zygote["deadline_ahead_s"] == "9" || zygote["deadline_ahead_s"] == "10"));
  CHECK(zygote["waiting_after"] == "0");
  for (int i = 0; i < 3; ++i) CHECK(zygote["worker" + std::to_string(i)] == "uid 1000");
}

TEST_CASE("a worker released while its admission waits leaves the admissions and ends" *
          doctest::skip(!kcoral::test::sandbox_possible())) {
  Layout layout;
  ChildReport zygote = in_child([&](int fd) {
    kcoral::Sandbox sandbox(layout.config());
    if (auto prepared = sandbox.prepare_zygote(); !prepared) return report(fd, "prepared", prepared.error().message);
    auto forked = sandbox.fork();
    if (!forked) return report(fd, "forked", forked.error().message);
    if (*forked == 0) {
      auto entered = sandbox.enter({fd}, "");
      report(fd, "entered", entered ? "yes" : entered.error().message);
      ::_exit(entered ? 0 : 4);
    }
    sandbox.admit(*forked);
    sandbox.release(*forked);  // its namespace's init killed, and the worker with it
    report(fd, "waiting", std::to_string(sandbox.admissions().size()));
    int status = 0;
    ::waitpid(*forked, &status, 0);
    report(fd, "killed", WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? "yes" : "no");
  });
  CAPTURE(zygote.text);
  CHECK(zygote["waiting"] == "0");
  CHECK(zygote["killed"] == "yes");
  CHECK(zygote["entered"] == "(not reported)");  // it never got past its admission
}

TEST_CASE("the readable paths are mounted canonical, none under another or under the system's" *
          doctest::skip(!kcoral::test::sandbox_possible())) {
  Layout layout;
  kcoral::SandboxConfig config = layout.config();
  fs::create_directories(layout.base / "other");
  fs::create_symlink(layout.base / "other", layout.base / "link");
  config.policy.readable_paths = {(layout.base / "readable" / "inner").string(), (layout.base / "readable").string(),
                           (layout.base / "link").string(), "/usr/share", "/etc"};
  ChildReport zygote = in_child([&](int fd) {
    kcoral::Sandbox sandbox(config);
    if (auto prepared = sandbox.prepare_zygote(); !prepared) return report(fd, "prepared", prepared.error().message);
    auto forked = sandbox.fork();
    if (!forked) return report(fd, "forked", forked.error().message);
    if (*forked == 0) {
      if (auto entered = sandbox.enter({fd}, ""); !entered) {
        report(fd, "entered", entered.error().message);
        ::_exit(3);
      }
      // The mounts of the readable paths, as this mount namespace lists them.
      std::istringstream mounts(read_file("/proc/self/mountinfo"));
      std::string mounted;
      for (std::string line; std::getline(mounts, line);) {
        std::istringstream fields(line);
        std::string id, parent, device, root, point;
        fields >> id >> parent >> device >> root >> point;
        if (point.starts_with(layout.base.string())) mounted += point + " ";
      }
      report(fd, "mounted", mounted);
      report(fd, "link", outcome(::access((layout.base / "link").c_str(), F_OK)));
      ::_exit(0);
    }
    sandbox.admit(*forked);
    sandbox.continue_admission(*forked, /*wait=*/true);
    ::waitpid(*forked, nullptr, 0);
    sandbox.release(*forked);
  });
  CAPTURE(zygote.text);
  // The link's target, once; the readable tree, once (its inner directory is in it); the
  // system's own paths not again.
  CHECK(zygote["mounted"] == (layout.base / "other").string() + " " + (layout.base / "readable").string() + " ");
  CHECK(zygote["link"] == "ENOENT");  // the link itself is not on the new root
}

TEST_CASE("a uid range that holds root, or an init that cannot run, is refused as the zygote prepares") {
  Layout layout;
  kcoral::SandboxConfig with_root = layout.config();
  with_root.policy.first_uid = 0;
  kcoral::SandboxConfig without_init = layout.config();
  without_init.init_path = (layout.base / "no-such-init").string();
  ChildReport zygote = in_child([&](int fd) {
    auto root = kcoral::Sandbox(with_root).prepare_zygote();
    report(fd, "root", root ? "ok" : root.error().message);
    auto init = kcoral::Sandbox(without_init).prepare_zygote();
    report(fd, "init", init ? "ok" : init.error().message);
  });
  CAPTURE(zygote.text);
  if (::geteuid() == 0)  // only a root zygote hands out outside users
    CHECK(zygote["root"] == "the sandbox's user id range may not include root, and must not be empty");
  CHECK(zygote["init"].starts_with("cannot run " + without_init.init_path));
}

TEST_CASE("a disabled sandbox forks a plain child, whose enter() changes nothing") {
  kcoral::SandboxConfig config;
  config.enabled = false;
  kcoral::Sandbox sandbox(config);
  CHECK(sandbox.limits_description() == "no sandbox: programs share every limit with the server");
  ChildReport zygote = in_child([&](int fd) {
    kcoral::Sandbox disabled(config);
    if (!disabled.prepare_zygote()) return report(fd, "prepared", "failed");
    auto forked = disabled.fork();
    if (!forked) return report(fd, "forked", forked.error().message);
    if (*forked == 0) {
      auto entered = disabled.enter({fd}, "");
      report(fd, "entered", entered ? "[" + *entered + "]" : entered.error().message);
      report(fd, "uid", std::to_string(::getuid()));
      report(fd, "stdout_open", ::fcntl(1, F_GETFD) >= 0 ? "yes" : "no");
      report(fd, "hostname_kept", [] {
        char host[256] = {};
        ::gethostname(host, sizeof host - 1);
        return std::string(host) == "kcoral" ? "no" : "yes";
      }());
      ::_exit(0);
    }
    disabled.admit(*forked);
    int status = 0;
    ::waitpid(*forked, &status, 0);
    report(fd, "child_exit", std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1));
    report(fd, "inits", std::to_string(disabled.inits().size()));
  });
  CAPTURE(zygote.text);
  CHECK(zygote["entered"] == "[]");
  CHECK(zygote["uid"] == std::to_string(::getuid()));
  CHECK(zygote["stdout_open"] == "yes");
  CHECK(zygote["hostname_kept"] == "yes");
  CHECK(zygote["child_exit"] == "0");
  CHECK(zygote["inits"] == "0");
}

TEST_CASE("the limits description says what bounds a program where no control groups are made") {
  Layout layout;
  kcoral::SandboxConfig config = layout.config();
  ChildReport zygote = in_child([&](int fd) {
    kcoral::Sandbox sandbox(config);
    if (auto prepared = sandbox.prepare_zygote(); !prepared) return report(fd, "prepared", prepared.error().message);
    report(fd, "description", sandbox.limits_description());
  });
  CAPTURE(zygote.text);
  std::string text = zygote["description"];
  CHECK(text.starts_with("no control groups (not asked for). "));
  CHECK(text.find("Memory: per process only (8192 MiB of address space)") != std::string::npos);
  CHECK(text.find("Descriptors: 64 per process, 2048 per program at most.") != std::string::npos);
  if (::geteuid() == 0)
    CHECK(text.find("Users: each worker runs as a user of its own outside, from 1879048192-1879113727") !=
          std::string::npos);
  else
    CHECK(text.find("Users: the server is not root") != std::string::npos);
}

}  // TEST_SUITE
