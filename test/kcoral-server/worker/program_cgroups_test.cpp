// ProgramCgroups (kcoral-server/worker/program_cgroups.cpp) on this machine's own control
// groups, where it may make them (as root, or in a delegated v2 group); skipped elsewhere.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cgroup_layout.hpp"
#include "program_cgroups.hpp"

// This process's control groups; none (said) where the machine has none.
std::optional<kcoral::CgroupLayout> layout_here() {
  auto layout = kcoral::read_cgroup_layout();
  if (!layout) {
    MESSAGE("no control groups here: " << layout.error().message);
    return std::nullopt;
  }
  return *layout;
}

TEST_CASE("a killed server's empty program groups of its name give way; one with a process stays") {
  auto layout = layout_here();
  if (!layout) return;
  const std::string name = "kcoral-test-" + std::to_string(::getpid());
  // Where a server of this name puts its groups, in each hierarchy.
  std::vector<std::string> servers;
  {
    auto probe = kcoral::ProgramCgroups::create(*layout, name, {});
    if (!probe) {
      MESSAGE("no control groups to make here: " << probe.error().message);
      return;
    }
    for (const std::string& controller : probe->controllers()) servers.push_back(probe->directory(controller));
  }  // removed, as a server that stops removes them
  // A killed server of that name left its groups: program-1 empty, program-2 holding a
  // process (as another live server of the same process id, in another PID namespace).
  pid_t holder = ::fork();
  if (holder == 0) {
    ::pause();
    ::_exit(0);
  }
  for (const std::string& server : servers) {
    REQUIRE(::mkdir(server.c_str(), 0755) == 0);
    REQUIRE(::mkdir((server + "/program-1").c_str(), 0755) == 0);
    REQUIRE(::mkdir((server + "/program-2").c_str(), 0755) == 0);
    std::ofstream(server + "/program-2/cgroup.procs") << holder;
  }
  {
    auto groups = kcoral::ProgramCgroups::create(*layout, name, {});
    REQUIRE_MESSAGE(groups.has_value(), groups.error().message);
    for (const std::string& server : servers) {
      CHECK_FALSE(std::filesystem::exists(server + "/program-1"));
      CHECK(std::filesystem::exists(server + "/program-2"));
    }
    auto first = groups->make("program-1");  // this server's first program: no collision
    CHECK_MESSAGE(first.has_value(), (first ? std::string() : first.error().message));
  }
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  for (const std::string& server : servers) {
    (void)::rmdir((server + "/program-2").c_str());
    (void)::rmdir((server + "/program-1").c_str());
    (void)::rmdir(server.c_str());
  }
}

TEST_CASE("a fork helper's group is made inside the server's; what a killed one left goes with the server's") {
  auto layout = layout_here();
  if (!layout) return;
  const std::string name = "kcoral-test-" + std::to_string(::getpid());
  std::vector<std::string> helpers;  // the helper's group, in each hierarchy
  // Makes the server's group and a helper's inside it with a program's group in it, and
  // forgets the helper's, as a helper killed does; the server's, when `killed`.
  // False where no groups can be made here.
  auto leave = [&](bool killed) {
    auto server = kcoral::ProgramCgroups::create(*layout, name, {0, 32});
    if (!server) {
      MESSAGE("no control groups to make here: " << server.error().message);
      return false;
    }
    auto helper = server->make_inner("kcoral-helper");
    REQUIRE_MESSAGE(helper.has_value(), helper.error().message);
    CHECK(helper->controllers() == server->controllers());
    helpers.clear();
    for (const std::string& controller : server->controllers()) {
      CHECK(helper->directory(controller) == server->directory(controller) + "/kcoral-helper");
      helpers.push_back(helper->directory(controller));
    }
    {
      auto program = helper->make("program-1");
      REQUIRE_MESSAGE(program.has_value(), program.error().message);
      std::string pids = server->directory("pids");
      if (!pids.empty()) {
        std::ifstream limit(pids + "/kcoral-helper/program-1/pids.max");
        std::string value;
        limit >> value;
        CHECK(value == "32");
      }
    }
    for (const std::string& group : helpers) (void)::mkdir((group + "/program-7").c_str(), 0755);
    helper->disown();
    if (killed) server->disown();
    return true;
  };
  auto server_groups_exist = [&] {
    return std::ranges::any_of(helpers, [](const std::string& group) {
      return std::filesystem::exists(std::filesystem::path(group).parent_path());
    });
  };
  if (!leave(/*killed=*/false)) return;  // the server's group removed at its end, with what the helper left
  CHECK_FALSE(helpers.empty());
  CHECK_FALSE(server_groups_exist());
  REQUIRE(leave(/*killed=*/true));  // a killed server: its whole tree goes, from the layout alone
  CHECK(server_groups_exist());
  kcoral::ProgramCgroups::remove_left(*layout, name);
  CHECK_FALSE(server_groups_exist());
}

namespace {

// A number read from a control file of `group`, 0 when there is none.
std::uint64_t control_number(const std::string& group, const std::string& file) {
  std::ifstream in(group + "/" + file);
  std::uint64_t value = 0;
  in >> value;
  return value;
}

// The value of `key` in the flat keyed file `file` of `group` (memory.stat).
std::uint64_t keyed_number(const std::string& group, const std::string& file, const std::string& key) {
  std::ifstream in(group + "/" + file);
  std::string name;
  for (std::uint64_t value = 0; in >> name >> value;)
    if (name == key) return value;
  return 0;
}

// Runs `body` in a child moved into `group` first; its exit status as waitpid gives it.
template <typename Body>
int run_in(const kcoral::ProgramCgroup& group, Body body) {
  int go[2];
  REQUIRE(::pipe(go) == 0);
  pid_t child = ::fork();
  if (child == 0) {
    char byte = 0;
    ::close(go[1]);
    if (::read(go[0], &byte, 1) != 1) ::_exit(2);
    ::_exit(body());
  }
  ::close(go[0]);
  REQUIRE(group.join(child));
  REQUIRE(::write(go[1], "x", 1) == 1);
  ::close(go[1]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return status;
}

}  // namespace

TEST_CASE("a program's group is kept for the next, its memory limit raised by the tmpfs pages left in it") {
  auto layout = layout_here();
  if (!layout) return;
  constexpr std::uint64_t kLimit = 64 << 20;
  constexpr std::size_t kLeft = 8 << 20;
  const std::string name = "kcoral-test-" + std::to_string(::getpid());
  auto groups = kcoral::ProgramCgroups::create(*layout, name, {kLimit, 0});
  if (!groups || groups->directory("memory").empty()) {
    MESSAGE("no memory control group to make here");
    return;
  }
  const std::string file = "/dev/shm/" + name;  // a tmpfs that outlives the program, as a compile cache
  auto first = groups->take();
  REQUIRE_MESSAGE(first.has_value(), first.error().message);
  std::vector<std::string> directories = first->directories();
  const std::string memory = groups->directory("memory") + "/program-1";
  REQUIRE(std::ranges::find(directories, memory) != directories.end());
  // And page cache, of a file on disk written and synced: reclaimable, unlike the tmpfs's.
  const std::string on_disk = std::filesystem::temp_directory_path().string() + "/" + name + ".disk";
  int status = run_in(*first, [&] {
    std::string page(kLeft, 'x');
    for (const std::string& path : {file, on_disk}) {
      std::ofstream out(path, std::ios::binary);
      for (int i = 0; i < (path == file ? 1 : 6); ++i)
        out.write(page.data(), static_cast<std::streamsize>(page.size()));
      if (!out) return 1;
    }
    ::sync();
    return 0;
  });
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  std::uint64_t left = keyed_number(memory, "memory.stat", "shmem");
  CHECK(left >= kLeft);
  const char* usage_file = layout->version == kcoral::CgroupVersion::v1 ? "memory.usage_in_bytes" : "memory.current";
  bool cached = control_number(memory, usage_file) > left + (32 << 20);  // not where the disk's file system is a tmpfs
  groups->give_back(std::move(*first));
  CHECK(std::filesystem::exists(memory));  // kept, not removed
  if (cached) {
    // Much that can be reclaimed: the reclaimer's, a process of its own; meanwhile a new
    // group serves.
    CHECK(groups->reclaimer_pid() > 0);
    auto meanwhile = groups->take();
    REQUIRE_MESSAGE(meanwhile.has_value(), meanwhile.error().message);
    CHECK(meanwhile->directories() != directories);
    groups->give_back(std::move(*meanwhile));
    pollfd done{groups->reclaimer_fd(), POLLIN, 0};
    REQUIRE(::poll(&done, 1, 30000) == 1);
    groups->reclaimed();
    CHECK(control_number(memory, usage_file) < left + (32 << 20));
  } else {
    MESSAGE("no page cache charged to the group: " << on_disk << " is not on a disk");
  }
  ::unlink(on_disk.c_str());

  // Taken again: the same group, whose limit is its own beyond what it still holds (the
  // tmpfs file's pages).
  auto second = groups->take();
  REQUIRE_MESSAGE(second.has_value(), second.error().message);
  CHECK(second->directories() == directories);
  const char* limit_file = layout->version == kcoral::CgroupVersion::v1 ? "memory.limit_in_bytes" : "memory.max";
  std::uint64_t held =
      std::max(control_number(memory, usage_file), control_number(memory, "memory.memsw.usage_in_bytes"));
  CHECK(held >= left);
  CHECK(control_number(memory, limit_file) == kLimit + held);
  // A program past its own limit is killed for it, and counted in this program only.
  status = run_in(*second, [] {
    std::string block(kLimit + (kLeft * 2), 'x');
    return block[block.size() / 2] == 'x' ? 0 : 1;
  });
  CHECK(WIFSIGNALED(status));
  CHECK(second->oom_kills() >= 1);  // v2 with memory.oom.group counts the victim twice
  groups->give_back(std::move(*second));
  auto third = groups->take();
  REQUIRE_MESSAGE(third.has_value(), third.error().message);
  CHECK(third->directories() == directories);
  CHECK(third->oom_kills() == 0);

  // A group that still holds a process when given back is removed, not kept.
  pid_t holder = ::fork();
  if (holder == 0) {
    ::pause();
    ::_exit(0);
  }
  REQUIRE(third->join(holder));
  groups->give_back(std::move(*third));
  CHECK_FALSE(std::filesystem::exists(memory));
  CHECK(::waitpid(holder, &status, 0) == holder);  // killed as the group went
  auto fourth = groups->take();
  REQUIRE_MESSAGE(fourth.has_value(), fourth.error().message);
  CHECK(fourth->directories() != directories);  // a new group: program-2
  ::unlink(file.c_str());
}

TEST_CASE("the groups a reclaimer had when it ended are removed; the next reclaimer serves the others") {
  auto layout = layout_here();
  if (!layout) return;
  const std::string name = "kcoral-test-" + std::to_string(::getpid());
  auto groups = kcoral::ProgramCgroups::create(*layout, name, {64 << 20, 0});
  if (!groups || groups->directory("memory").empty()) {
    MESSAGE("no memory control group to make here");
    return;
  }
  const char* usage_file = layout->version == kcoral::CgroupVersion::v1 ? "memory.usage_in_bytes" : "memory.current";
  const std::string directory = std::filesystem::temp_directory_path().string() + "/" + name;
  std::filesystem::create_directories(directory);
  // A program's group left holding 48 MiB of page cache; the memory group's directory.
  auto dirty = [&](const std::string& file) -> std::pair<kcoral::ProgramCgroup, std::string> {
    auto group = groups->take();
    REQUIRE_MESSAGE(group.has_value(), group.error().message);
    std::string memory = *std::ranges::find_if(group->directories(), [&](const std::string& d) {
      return d.starts_with(groups->directory("memory") + "/");
    });
    int status = run_in(*group, [&] {
      std::ofstream out(directory + "/" + file, std::ios::binary);
      std::string block(8 << 20, 'x');
      for (int i = 0; i < 6; ++i) out.write(block.data(), static_cast<std::streamsize>(block.size()));
      out.close();
      ::sync();
      return out ? 0 : 1;
    });
    REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    return {std::move(*group), memory};
  };
  auto wait_for_reclaimer = [&] {
    pollfd done{groups->reclaimer_fd(), POLLIN, 0};
    REQUIRE(::poll(&done, 1, 30000) == 1);
    groups->reclaimed();
  };
  auto [first, first_memory] = dirty("first");  // and then taken again for the second
  if (control_number(first_memory, usage_file) < (40 << 20)) {
    MESSAGE("no page cache charged to the group: " << directory << " is not on a disk");
    std::filesystem::remove_all(directory);
    return;
  }
  groups->give_back(std::move(first));
  wait_for_reclaimer();  // the reclaimer runs, and is idle
  pid_t reclaimer = groups->reclaimer_pid();
  REQUIRE(reclaimer > 0);
  // Stopped, it is sent the second group, and never answers: it ends with the group.
  REQUIRE(::kill(reclaimer, SIGSTOP) == 0);
  auto [second, second_memory] = dirty("second");
  groups->give_back(std::move(second));
  REQUIRE(::kill(reclaimer, SIGKILL) == 0);
  wait_for_reclaimer();
  CHECK_FALSE(std::filesystem::exists(second_memory));  // removed with the reclaimer
  // The next group to reclaim starts the next reclaimer.
  auto [third, third_memory] = dirty("third");
  groups->give_back(std::move(third));
  CHECK(groups->reclaimer_pid() > 0);
  CHECK(groups->reclaimer_pid() != reclaimer);
  wait_for_reclaimer();
  CHECK(std::filesystem::exists(third_memory));
  CHECK(control_number(third_memory, usage_file) < (32 << 20));
  std::filesystem::remove_all(directory);
}
