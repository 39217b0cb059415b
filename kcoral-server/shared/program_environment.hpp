// ProgramEnvironment: the environment a program finds, a fixed list, and nothing of the
// server's (whose environment may hold KCORAL_TOKEN or any other secret of the operator):
//
//   PATH      the worker's own interpreter's bin directory first, then the system's
//             (kDefaultSystemPath; on a GPU server the CUDA toolkit's bin before it, where
//             it exists), or instead of the system's what the operator gives as PATH
//   HOME      /tmp/home, in the program's private scratch space
//   TMPDIR    /tmp, the scratch space (with --sandbox none both are the worker's own
//             directory under the work root)
//   LANG      C.UTF-8
//   USER, LOGNAME   kcoral
//   GLIBC_TUNABLES  glibc.malloc.hugetlb=1 (kLargeAllocationsInHugePages): large
//             allocations in transparent huge pages where the kernel allows them on
//             request, as a server's kernel usually does (see below)
//   CUDA_VISIBLE_DEVICES          a GPU server's worker: its GPU's UUID
//   CUDA_DEVICE_MAX_CONNECTIONS   when --cuda-connections sets it
//   in a sandbox, the compile caches of the tools kernel authors use, each in its own
//   directory of the tenant's compile cache (sandbox_layout.hpp's kCompileCacheMount):
//     TRITON_CACHE_DIR (triton), TVM_FFI_CACHE_DIR (tvm-ffi: build_inline and friends),
//     CUTE_DSL_CACHE_DIR (cutedsl), CUDA_CACHE_PATH (nv: the driver's PTX JIT cache,
//     bounded by CUDA_CACHE_MAXSIZE, a quarter of the cache), TORCH_EXTENSIONS_DIR
//     (torch_extensions), TORCHINDUCTOR_CACHE_DIR (torchinductor), and
//     KCORAL_COMPILE_CACHE (the cache itself: compile_tirx keeps tirx/ there)
//   and each NAME=VALUE of --program-env, which may also replace any of the above.
//
// The worker sets it before its first program (os.environ and the C environment both).
// Its /proc/self/environ still shows the block the zygote was started with, which holds
// nothing of the server's but what the worker machinery reads (zygote_handle.hpp), and
// which a sandboxed program cannot read (the worker is not dumpable).
//
//   auto variables = program_environment(spec);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kcoral/error.hpp"
#include "sandbox_layout.hpp"

namespace kcoral {

using EnvironmentVariables = std::vector<std::pair<std::string, std::string>>;

inline constexpr const char* kDefaultSystemPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
// The CUDA toolkit's tools (ncu, compute-sanitizer, nvcc), on a GPU server's PATH.
inline constexpr const char* kCudaToolkitBin = "/usr/local/cuda/bin";
// glibc's malloc asks for transparent huge pages (madvise) for what it maps: a 64 MiB
// bytes value is then 32 page faults, not 16,384, which take three times its copy's time
// on a virtual machine (a blob of 64 MiB made into bytes: 52 ms before, 21 ms after).
// Read once, when a process starts: the zygote gets it too (zygote_handle.cpp), so the
// worker's own interpreter has it, and programs' processes inherit it. It does nothing
// where the kernel's transparent_hugepage setting is "never", or under a glibc before
// 2.35; the operator replaces it with --program-env GLIBC_TUNABLES=...
inline constexpr const char* kGlibcTunables = "GLIBC_TUNABLES";
inline constexpr const char* kLargeAllocationsInHugePages = "glibc.malloc.hugetlb=1";

struct ProgramEnvironmentSpec {
  std::string interpreter_bin;          // the directory of the worker's Python
  std::string system_path = kDefaultSystemPath;  // what follows it on PATH
  std::string home = kHome;
  std::string tmpdir = kScratch;
  std::string compile_cache;            // kCompileCacheMount in a sandbox; empty: none
  std::uint64_t compile_cache_bytes = 0;  // its size, for CUDA_CACHE_MAXSIZE
  std::string visible_devices;          // CUDA_VISIBLE_DEVICES; empty: none
  int cuda_connections = 0;             // > 0: CUDA_DEVICE_MAX_CONNECTIONS
  EnvironmentVariables operator_variables;  // --program-env, in order
};

// The list above, in that order, the operator's additions last.
[[nodiscard]] EnvironmentVariables program_environment(const ProgramEnvironmentSpec& spec);

// NAME=VALUE, as --program-env takes it: NAME of letters, digits and underscores, not
// starting with a digit.
[[nodiscard]] Result<std::pair<std::string, std::string>> parse_environment_assignment(std::string_view text);

}  // namespace kcoral
