// What a sandboxed program finds, where more than the sandbox needs to know it: the
// worker's environment (program_environment.hpp) names these paths, and the front mounts
// each tenant's compile cache (front/compile_caches.hpp) at kCompileCacheMount inside a
// worker's mount namespace, owned there by the program's user.
#pragma once

#include <sys/types.h>

namespace kcoral {

// The program's user and group inside its user namespace (mapped to one of
// --sandbox-uid-range outside).
inline constexpr uid_t kInsideUid = 1000;
inline constexpr gid_t kInsideGid = 1000;
// The private scratch space (a tmpfs of --scratch-bytes), and HOME inside it.
inline constexpr const char* kScratch = "/tmp";
inline constexpr const char* kHome = "/tmp/home";
// Where the tenant's compile cache is mounted, on the read-only root. Until (or unless)
// it is, a directory of the scratch space is there instead (kCompileCacheStandIn), so
// that the tools the environment points at it can always write.
inline constexpr const char* kCompileCacheMount = "/var/cache/kcoral";
inline constexpr const char* kCompileCacheStandIn = "/tmp/home/.cache/kcoral";
// The system a program may read, read-only. Top-level symbolic links (merged /usr) are
// copied as links.
inline constexpr const char* kSystemPaths[] = {"/usr", "/etc", "/opt", "/bin", "/sbin",
                                               "/lib", "/lib32", "/lib64", "/libx32"};

}  // namespace kcoral
