// ProgramCgroups (kcoral-server/worker/program_cgroups.cpp) on this machine's own control
// groups, where it may make them (as root, or in a delegated v2 group); skipped elsewhere.
#include <doctest/doctest.h>
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
