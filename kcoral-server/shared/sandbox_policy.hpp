// What bounds every program, and what it may read: the values of kcoral-server's sandbox
// flags (front/main.cpp explains each), held in this one type from the front's ServerConfig
// through the worker parent's WorkerOptions to the Sandbox that applies them
// (worker/sandbox.hpp), with their defaults written once, here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kcoral {

struct SandboxPolicy {
  std::uint64_t memory_bytes = std::uint64_t{8} << 30;  // of a program (and of each of its processes)
  std::uint64_t file_size_bytes = std::uint64_t{1} << 30;
  // Processes and threads of one program: its control group, and its user's RLIMIT_NPROC.
  std::uint64_t processes = 256;
  std::uint64_t open_files = 1024;  // of each process: with `processes`, 262,144 a program
  std::uint64_t scratch_bytes = std::uint64_t{2} << 30;
  // The outside ids of workers, when the server runs as root (uid and gid alike, one per
  // live worker; shared/user_id_pool.hpp): above the ranges systemd and its containers pick
  // from, below 2^31.
  std::uint32_t first_uid = 1879048192;  // 0x70000000
  std::uint32_t last_uid = 1879048192 + 65535;
  std::vector<std::string> readable_paths;  // read-only, besides the system's

  bool operator==(const SandboxPolicy&) const = default;
};

}  // namespace kcoral
