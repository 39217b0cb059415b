#include "huge_pages.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kcoral {
namespace {

// Linux's value (include/uapi/asm-generic/mman-common.h, 6.1); glibc 2.36 does not name it.
#ifndef MADV_COLLAPSE
constexpr int MADV_COLLAPSE = 25;
#endif

constexpr std::uintptr_t kDefaultHugePageBytes = 2 << 20;

std::uintptr_t huge_page_bytes() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
  std::uintptr_t bytes = 0;
  return file >> bytes && bytes > 0 && (bytes & (bytes - 1)) == 0 ? bytes : kDefaultHugePageBytes;
}

std::uintptr_t hex(std::string_view text) {
  std::uintptr_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  return error == std::errc() && end == text.data() + text.size() ? value : 0;
}

}  // namespace

std::vector<AddressRange> collapsible_ranges(std::string_view maps, std::uintptr_t huge_page_bytes) {
  std::vector<AddressRange> ranges;
  std::istringstream lines{std::string(maps)};
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);  // start-end perms offset device inode [path]
    std::string span, perms, offset, device, inode, path;
    if (!(fields >> span >> perms >> offset >> device >> inode)) continue;
    fields >> path;
    if (perms != "rw-p" || inode != "0" || !(path.empty() || path == "[heap]")) continue;
    std::size_t dash = span.find('-');
    std::uintptr_t start = hex(std::string_view(span).substr(0, dash));
    std::uintptr_t end = dash == std::string::npos ? 0 : hex(std::string_view(span).substr(dash + 1));
    std::uintptr_t first = (start + huge_page_bytes - 1) & ~(huge_page_bytes - 1);
    std::uintptr_t last = end & ~(huge_page_bytes - 1);
    if (start != 0 && first < last) ranges.push_back({first, last});  // start 0: no span read
  }
  return ranges;
}

std::string HugePageReport::describe() const {
  char text[160];
  if (!unavailable.empty()) return "none: " + unavailable;
  std::snprintf(text, sizeof text, "%llu MiB of the worker parent's memory in huge pages (of %llu MiB it could take), in %.2f s",
                static_cast<unsigned long long>(collapsed_bytes >> 20),
                static_cast<unsigned long long>(eligible_bytes >> 20), seconds);
  return text;
}

HugePageReport collapse_anonymous_memory() {
  HugePageReport report;
  auto started = std::chrono::steady_clock::now();
  std::ifstream file("/proc/self/maps");
  std::stringstream maps;
  maps << file.rdbuf();
  // Read whole before the first collapse, which may change the list.
  int first_error = 0;
  for (AddressRange range : collapsible_ranges(maps.str(), huge_page_bytes())) {
    std::size_t bytes = range.end - range.start;
    report.eligible_bytes += bytes;
    if (::madvise(reinterpret_cast<void*>(range.start), bytes, MADV_COLLAPSE) == 0)
      report.collapsed_bytes += bytes;
    else if (first_error == 0)
      first_error = errno;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (report.collapsed_bytes == 0)
    report.unavailable = report.eligible_bytes == 0 ? std::string("no anonymous memory of 2 MiB or more")
                         : first_error == EINVAL ? std::string("the kernel cannot collapse memory (MADV_COLLAPSE needs Linux 6.1)")
                                                 : std::string("madvise(MADV_COLLAPSE): ") + std::strerror(first_error);
  return report;
}

}  // namespace kcoral
