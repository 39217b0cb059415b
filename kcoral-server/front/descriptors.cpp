// Descriptors: the limit, the count, and the division of the one among the server's uses.
#include "descriptors.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>

namespace kcoral {
namespace {

constexpr std::size_t kReserve = 128;
constexpr std::size_t kPerConnection = 2;
constexpr std::size_t kPerWorker = 4;
constexpr std::size_t kFewestConnections = 16;

}  // namespace

std::uint64_t raise_descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<std::uint64_t>(limit.rlim_cur);
}

std::size_t open_descriptors() {
  std::error_code ec;
  std::size_t count = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++count;
  return count > 0 ? count - 1 : 0;  // less the directory's own
}

DescriptorPlan plan_descriptors(std::uint64_t limit, std::size_t max_connections, std::size_t blob_cache_files,
                                std::size_t workers) {
  DescriptorPlan plan{max_connections, blob_cache_files, {}};
  std::uint64_t fixed = kReserve + kPerWorker * workers + kOverflowConnections;
  auto needed = [&] { return fixed + kPerConnection * plan.max_connections + plan.blob_cache_files; };
  if (needed() <= limit) return plan;
  std::uint64_t left = limit > fixed ? limit - fixed : 0;
  // The cache gives way first, to a quarter of what is left; then connections.
  plan.blob_cache_files = std::min<std::uint64_t>(plan.blob_cache_files, left / 4);
  plan.max_connections = std::min<std::uint64_t>(plan.max_connections, (left - plan.blob_cache_files) / kPerConnection);
  plan.adjusted = "the descriptor limit is " + std::to_string(limit) + ": lowered";
  if (plan.max_connections != max_connections)
    plan.adjusted += " --max-connections to " + std::to_string(plan.max_connections);
  if (plan.blob_cache_files != blob_cache_files)
    plan.adjusted += std::string(plan.max_connections != max_connections ? " and" : "") +
                     " --blob-cache-max-files to " + std::to_string(plan.blob_cache_files);
  plan.adjusted += " (raise the hard limit, `ulimit -Hn`, to keep them)";
  if (plan.max_connections < kFewestConnections) plan.max_connections = 0;
  return plan;
}

}  // namespace kcoral
