// close_descriptors_except: close_range(2) over the gaps between the descriptors kept.
#include "descriptor_table.hpp"

#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace kcoral {

void close_descriptors_except(std::vector<int> keep, int from) {
  std::sort(keep.begin(), keep.end());
  auto first = static_cast<unsigned>(std::max(from, 0));
  for (int fd : keep) {
    if (fd < 0 || static_cast<unsigned>(fd) < first) continue;
    if (static_cast<unsigned>(fd) > first) ::syscall(SYS_close_range, first, static_cast<unsigned>(fd) - 1, 0);
    first = static_cast<unsigned>(fd) + 1;
  }
  ::syscall(SYS_close_range, first, ~0u, 0);
}

}  // namespace kcoral
