// huge_pages (kcoral-server/worker/huge_pages.cpp): which mappings the worker parent
// collapses into huge pages, read from a made-up /proc/self/maps; and, where the kernel can
// (Linux 6.1 or later, as the development and CI machines have), that a populated
// anonymous region of this process ends up in huge pages.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "huge_pages.hpp"

using kcoral::AddressRange;

namespace {

constexpr std::uintptr_t kHuge = 2 << 20;

// AnonHugePages, in KiB, of the mapping of /proc/self/smaps that holds `address`.
long anon_huge_kib(std::uintptr_t address) {
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long start = 0, end = 0;
    char perms[8];
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &start, &end, perms) == 3)  // a mapping's first line
      inside = start <= address && address < end;
    else if (inside && line.starts_with("AnonHugePages:"))
      return std::stol(line.substr(15));
  }
  return -1;
}

}  // namespace

TEST_CASE("the private, writable, anonymous mappings and the heap are taken, in whole huge pages") {
  const char* maps =
      "00400000-00600000 r-xp 00000000 08:01 1234 /usr/bin/python3\n"
      "00a00000-01200000 rw-p 00000000 00:00 0 [heap]\n"
      "7f0000100000-7f0000900000 rw-p 00000000 00:00 0 \n"
      "7f0001000000-7f0001100000 rw-p 00000000 00:00 0\n"                        // under 2 MiB
      "7f0002000000-7f0002800000 rw-p 00000000 08:01 99 /usr/lib/libtorch.so\n"  // a file's
      "7f0003000000-7f0003800000 r--p 00000000 00:00 0\n"                        // read-only
      "7f0004000000-7f0004800000 rw-s 00000000 00:05 7 /dev/zero (deleted)\n"    // shared
      "7ffc00000000-7ffc00800000 rw-p 00000000 00:00 0 [stack]\n"
      "garbage line\n";
  auto ranges = kcoral::collapsible_ranges(maps, kHuge);
  REQUIRE(ranges.size() == 2);
  CHECK(ranges[0] == AddressRange{0x00a00000, 0x01200000});
  // 7f0000100000 rounds up to the next 2 MiB, 7f0000900000 down to it.
  CHECK(ranges[1] == AddressRange{0x7f0000200000, 0x7f0000800000});
}

TEST_CASE("a populated anonymous region is collapsed into huge pages where the kernel can") {
  std::size_t bytes = 8 * kHuge;
  void* region = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(region != MAP_FAILED);
  std::memset(region, 1, bytes);
  auto report = kcoral::collapse_anonymous_memory();
  INFO(report.describe());
  if (report.unavailable.empty()) {
    CHECK(report.collapsed_bytes >= 4 * kHuge);
    CHECK(report.describe().find("memory in huge pages") != std::string::npos);
    // The region's aligned middle, at least, is in huge pages now.
    CHECK(anon_huge_kib(reinterpret_cast<std::uintptr_t>(region)) >= 6 * 2048);
    CHECK(static_cast<unsigned char*>(region)[bytes - 1] == 1);
  } else {
    MESSAGE("not checked here: " << report.unavailable);
    CHECK(report.collapsed_bytes == 0);
  }
  ::munmap(region, bytes);
}
