// The worker parent's anonymous memory in huge pages, so that forking a worker copies, and
// the worker's exit tears down, one page-table entry for each 2 MiB instead of 512.
//
// A worker parent that preloads torch and triton holds about 300 MiB of anonymous memory
// (Python's heap and arenas, the libraries' allocations). Forking it and letting the child
// exit cost 11.6 ms on the 2-core development machine, against 0.8 ms for a bare
// interpreter; with that memory collapsed into huge pages (madvise MADV_COLLAPSE, Linux 6.1
// or later) 3.8 ms. A child's first write to a shared huge page splits it and copies only the
// 4 KiB page written (Linux 5.8 or later), so a worker's copy-on-write costs what it did. The
// collapse fills the holes of each 2 MiB range it takes, which grows the parent by a few
// percent (18 MiB of 300 there), shared with the workers until written.
//
// Best effort: where the kernel cannot (older than 6.1, transparent huge pages turned off
// for the process, no huge page free), nothing changes and the report says why.
//   auto report = kcoral::collapse_anonymous_memory();
//   std::fprintf(stderr, "kcoral-server: huge pages: %s\n", report.describe().c_str());
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kcoral {

struct AddressRange {
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
  bool operator==(const AddressRange&) const = default;
};

// The huge-page-aligned parts of the private, writable, anonymous mappings (no file;
// the heap included, the stacks not) listed in `maps` (/proc/self/maps' text).
[[nodiscard]] std::vector<AddressRange> collapsible_ranges(std::string_view maps, std::uintptr_t huge_page_bytes);

struct HugePageReport {
  std::uint64_t eligible_bytes = 0;   // in collapsible ranges
  std::uint64_t collapsed_bytes = 0;  // in ranges the kernel collapsed
  double seconds = 0;
  std::string unavailable;  // why none was collapsed; empty when some was

  [[nodiscard]] std::string describe() const;
};

// Collapses this process's collapsible ranges into huge pages.
[[nodiscard]] HugePageReport collapse_anonymous_memory();

}  // namespace kcoral
