// Sandbox::enter's steps: mounts, the pivot, descriptors, the user and the limits.
#include "sandbox_entry.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "descriptor_table.hpp"
#include "sandbox.hpp"
#include "mount_calls.hpp"
#include "sandbox_layout.hpp"

namespace kcoral::sandbox_entry {
namespace {

namespace fs = std::filesystem;

// What a program may read of /sys, each at its own path (the rest of /sys is absent):
//   /sys/devices/system/cpu    os.cpu_count() (glibc reads cpu/online), torch's cpuinfo
//                              (topology, caches), the CUDA driver's CPU affinity
//   /sys/devices/system/node   NUMA nodes (libnuma, the driver, torch)
//   /sys/kernel/mm/transparent_hugepage   glibc's and allocators' huge page size
//   /sys/bus/pci               the PCI bus's device links, by which NVML and the driver
//                              find a GPU's device directory; of the directories they
//                              lead to only the worker's own GPU's is there (below), so
//                              no other device, a network card's MAC address among them
// and on a GPU server the worker's GPU's device directory (/sys/devices/pci.../<bus id>)
// and the NVIDIA driver's modules (/sys/module/nvidia*: version, parameters). Never
// /sys/class (the network interfaces, their addresses), /sys/firmware, /sys/fs.
constexpr const char* kSysPaths[] = {"/sys/devices/system/cpu", "/sys/devices/system/node",
                                     "/sys/kernel/mm/transparent_hugepage", "/sys/bus/pci"};
// The scratch space's inodes: one per 16 KiB of it (131,072 for the default 2 GiB), so
// that empty files cannot cost the kernel more memory than the space itself.
constexpr std::uint64_t kScratchBytesPerInode = 16384;
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom"};
// What a worker needs beyond what it holds when its memory limit is set: the courier's
// thread, the interpreter's allocations for a first small program (measured: 10-13 MiB
// on a CPU server), and room for a program to do anything at all. A limit that leaves
// less is a mistake to say at start, not a worker that dies later.
constexpr std::uint64_t kMemoryMarginBytes = std::uint64_t{64} << 20;

// An empty file or directory at `target`, to mount something of that kind on.
Status make_mountpoint(const std::string& target, bool directory) {
  if (directory) return make_directories(target);
  if (auto status = make_directories(fs::path(target).parent_path()); !status) return status;
  UniqueFd fd(::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0444));
  if (!fd) return system_error("creating " + target);
  return {};
}

Status mount_or_fail(const char* source, const std::string& target, const char* type, unsigned long flags,
                     const char* data = nullptr) {
  if (::mount(source, target.c_str(), type, flags, data) != 0)
    return system_error(std::string("mounting ") + (source != nullptr ? source : type) + " on " + target);
  return {};
}

// Binds `source` at `target` (recursively), read-only and without set-uid or device files.
Status bind_read_only(const std::string& source, const std::string& target) {
  struct stat info {};
  if (::stat(source.c_str(), &info) != 0) return {};  // nothing there to show
  if (auto status = make_mountpoint(target, S_ISDIR(info.st_mode)); !status) return status;
  if (auto status = mount_or_fail(source.c_str(), target, nullptr, MS_BIND | MS_REC); !status) return status;
  mount_attr attributes{};
  attributes.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (mount_calls::mount_setattr(AT_FDCWD, target.c_str(), AT_RECURSIVE, &attributes) == 0) return {};
  // Kernels before 5.12: the top mount at least.
  return mount_or_fail(nullptr, target, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV);
}



// The device nodes of `gpus`: each GPU's own and the driver's shared ones.
std::vector<std::string> gpu_devices(const std::vector<NvidiaGpu>& gpus) {
  std::vector<std::string> devices{"nvidiactl", "nvidia-uvm"};
  for (const NvidiaGpu& gpu : gpus) devices.push_back("nvidia" + std::to_string(gpu.minor));
  return devices;
}

// What a GPU worker may read of /sys besides kSysPaths: its GPUs' device directories and
// the NVIDIA modules.
std::vector<std::string> gpu_sys_paths(const std::vector<NvidiaGpu>& gpus) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const NvidiaGpu& gpu : gpus) {
    fs::path device = fs::canonical("/sys/bus/pci/devices/" + gpu.bus_id, ec);
    if (!ec && device.string().rfind("/sys/devices/", 0) == 0) paths.push_back(device.string());
  }
  for (const auto& module : fs::directory_iterator("/sys/module", ec))
    if (module.path().filename().string().rfind("nvidia", 0) == 0) paths.push_back(module.path().string());
  return paths;
}

// Sets soft and hard limit to `value`, or to the hard limit the server was given where that
// is lower (a process can only lower its hard limit).
Status set_limit(int resource, std::uint64_t value, const char* name) {
  rlimit current{};
  if (::getrlimit(resource, &current) == 0 && current.rlim_max != RLIM_INFINITY)
    value = std::min<std::uint64_t>(value, current.rlim_max);
  rlimit limit{static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
  if (::setrlimit(resource, &limit) != 0) return system_error(std::string("setting the limit on ") + name);
  return {};
}

// Fails when the per-process memory limit `limit_bytes` (RLIMIT_AS, or RLIMIT_DATA on a GPU
// server) cannot hold what this process maps already and kMemoryMarginBytes: setrlimit
// itself takes a limit below the current size, and the worker would then fail its first
// allocation past it (a thread's stack, the interpreter's next arena) with nothing said.
// The control group's memory limit needs no such check: it is written into an empty group
// before the fork, and the pages a worker shares with the zygote stay charged to the
// zygote's group, so that the group counts only what the worker touches afterwards; a
// worker that runs out of it before it is ready is killed, and the zygote says so.
Status check_memory_limit(bool gpu, std::uint64_t limit_bytes) {
  rlimit current{};
  int resource = gpu ? RLIMIT_DATA : RLIMIT_AS;
  bool hard_lower = ::getrlimit(resource, &current) == 0 && current.rlim_max != RLIM_INFINITY &&
                    current.rlim_max < limit_bytes;
  std::uint64_t effective = hard_lower ? current.rlim_max : limit_bytes;
  // In pages: the address space (what RLIMIT_AS counts) first; data and stack (what
  // RLIMIT_DATA counts, and the stack's few hundred KiB) sixth.
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0, shared = 0, text = 0, library = 0, data = 0;
  if (!(statm >> size >> resident >> shared >> text >> library >> data)) return {};  // unknown: the start shows
  std::uint64_t held = (gpu ? data : size) * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  std::uint64_t needed = held + kMemoryMarginBytes;
  if (effective >= needed) return {};
  auto mib = [](std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; };
  std::uint64_t suggested = (needed + (std::uint64_t{1} << 20) - 1) & ~((std::uint64_t{1} << 20) - 1);
  std::string what = gpu ? "data segment (RLIMIT_DATA, on a GPU server)" : "address space (RLIMIT_AS)";
  std::string limit = hard_lower ? "the hard limit on the " + what + " that the server was started with is " +
                                       mib(effective) + " (below --memory-limit-bytes)"
                                 : "--memory-limit-bytes is " + mib(limit_bytes);
  return fail(ErrorKind::engine,
              limit + ", but a worker already holds " + mib(held) + " of " + what +
                  " when it starts (the interpreter and the modules the worker parent preloads): raise it to at "
                  "least " + mib(suggested) + " (--memory-limit-bytes " + std::to_string(suggested) +
                  "), which leaves " + mib(kMemoryMarginBytes) + " for a program");
}

Status drop_capabilities() {
  for (int cap = 0; cap <= CAP_LAST_CAP; ++cap) ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capset, &header, data) != 0) return system_error("dropping capabilities");
  return {};
}

// Raises the effective capabilities back to the permitted ones: a root process whose
// effective uid leaves 0 loses them, and keeps them permitted while its real uid is 0.
Status raise_effective_capabilities() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return system_error("reading capabilities");
  for (auto& set : data) set.effective = set.permitted;
  if (::syscall(SYS_capset, &header, data) != 0) return system_error("raising capabilities");
  return {};
}

Status loopback_up() {
  UniqueFd socket(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!socket) return system_error("socket");
  ifreq request{};
  std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(socket.get(), SIOCGIFFLAGS, &request) != 0) return system_error("reading the loopback's flags");
  request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
  if (::ioctl(socket.get(), SIOCSIFFLAGS, &request) != 0) return system_error("bringing the loopback up");
  return {};
}

}  // namespace

Status make_directories(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return fail(ErrorKind::engine, "creating " + path + ": " + ec.message());
  return {};
}

// Each GPU's UUID and device minor, from the driver's /proc files: a directory per GPU,
// named by its bus id, whose `information` has "GPU UUID:" and "Device Minor:" lines.
Result<std::vector<NvidiaGpu>> find_gpus(const std::string& visible_devices, const std::string& driver_gpus) {
  std::map<std::string, NvidiaGpu> listed;  // by UUID
  std::error_code ec;
  for (const auto& gpu : fs::directory_iterator(driver_gpus, ec)) {
    std::ifstream information(gpu.path() / "information");
    std::string line, uuid;
    std::optional<int> minor;
    while (std::getline(information, line)) {
      auto value = [&](std::size_t from) {
        std::size_t start = line.find_first_not_of(" \t", from);
        return start == std::string::npos ? std::string() : line.substr(start);
      };
      if (line.starts_with("GPU UUID:")) uuid = value(9);
      if (line.starts_with("Device Minor:")) minor = std::atoi(value(13).c_str());
    }
    if (!uuid.empty() && minor) listed.emplace(uuid, NvidiaGpu{*minor, gpu.path().filename().string()});
  }
  std::vector<NvidiaGpu> gpus;
  std::stringstream names(visible_devices);
  for (std::string uuid; std::getline(names, uuid, ',');) {
    auto found = listed.find(uuid);
    if (found == listed.end())
      return fail(ErrorKind::engine, "the worker's GPU " + uuid + " is not among the driver's GPUs (" + driver_gpus +
                                         "): the GPUs changed since the server started; restart it");
    gpus.push_back(found->second);
  }
  return gpus;
}

// Namespaces but the user's, which comes last (its maps are the zygote's to write), and
// the cgroup namespace, made once the zygote has moved the worker into its control group.
Status enter_namespaces() {
  if (::unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS) != 0)
    return system_error("cannot make the sandbox's namespaces");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return system_error("making / private");
  return {};
}

// The new root: a small tmpfs holding mountpoints (read-only once built), with the system's
// paths read-only on it, and of /sys the parts in kSysPaths and, for a GPU worker
// (`gpu_worker`), the NVIDIA modules' and its own GPUs' (`gpus`).
Status mount_system(const std::string& root, bool gpu_worker, const std::vector<NvidiaGpu>& gpus) {
  KCORAL_TRY(mount_or_fail("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m"));
  for (const char* path : kSystemPaths) {
    struct stat info {};
    if (::lstat(path, &info) != 0) continue;
    if (S_ISLNK(info.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(path, target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (::symlink(target, (root + path).c_str()) != 0) return system_error(std::string("linking ") + path);
    } else {
      KCORAL_TRY(bind_read_only(path, root + path));
    }
  }
  std::vector<std::string> sys_paths(std::begin(kSysPaths), std::end(kSysPaths));
  if (gpu_worker)
    for (std::string& path : gpu_sys_paths(gpus)) sys_paths.push_back(std::move(path));
  for (const std::string& path : sys_paths) KCORAL_TRY(bind_read_only(path, root + path));
  return {};
}

// Private scratch space: /tmp (HOME below it), /var/tmp and /dev/shm are the same tmpfs,
// its size and its inodes bounded, owned by `owner`.
Status mount_scratch(const std::string& root, std::uint64_t scratch_bytes, uid_t owner) {
  gid_t group = owner;
  std::uint64_t inodes = std::max<std::uint64_t>(1024, scratch_bytes / kScratchBytesPerInode);
  std::string options = "mode=0700,uid=" + std::to_string(owner) + ",gid=" + std::to_string(group) +
                        ",size=" + std::to_string(scratch_bytes) + ",nr_inodes=" + std::to_string(inodes);
  KCORAL_TRY(make_directories(root + kScratch));
  KCORAL_TRY(mount_or_fail("tmpfs", root + kScratch, "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()));
  for (const std::string& directory :
       {root + kHome, root + kHome + "/.cache", root + kCompileCacheStandIn, root + kScratch + "/.shm"}) {
    KCORAL_TRY(make_directories(directory));
    if (::chown(directory.c_str(), owner, group) != 0) return system_error("chown " + directory);
  }
  return {};
}

// The interpreter's and the operator's paths, read-only (after the scratch space, on which
// those under /tmp are mounted).
Status mount_readable(const std::string& root, const std::vector<std::string>& readable) {
  for (const std::string& path : readable) KCORAL_TRY(bind_read_only(path, root + path));
  return {};
}

// /var/tmp, a link to the scratch space, and the compile cache's mountpoint, with the
// stand-in on it until the front mounts the tenant's cache over it (sandbox_layout.hpp).
Status mount_var(const std::string& root) {
  KCORAL_TRY(make_directories(root + "/var"));
  if (::symlink(kScratch, (root + "/var/tmp").c_str()) != 0) return system_error("linking /var/tmp");
  KCORAL_TRY(make_directories(root + kCompileCacheMount));
  return mount_or_fail((root + kCompileCacheStandIn).c_str(), root + kCompileCacheMount, nullptr, MS_BIND);
}

// /dev: a few harmless nodes, a GPU worker's (`gpu_worker`) NVIDIA nodes and its own GPUs'
// (`gpus`), the standard links, and /dev/shm on the scratch space.
Status mount_dev(const std::string& root, bool gpu_worker, const std::vector<NvidiaGpu>& gpus) {
  KCORAL_TRY(make_directories(root + "/dev"));
  KCORAL_TRY(mount_or_fail("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k"));
  std::vector<std::string> devices(std::begin(kDevices), std::end(kDevices));
  if (gpu_worker)
    for (std::string& node : gpu_devices(gpus)) devices.push_back(std::move(node));
  for (const std::string& device : devices) {
    std::string host = "/dev/" + device;
    if (::access(host.c_str(), F_OK) != 0) continue;
    KCORAL_TRY(make_mountpoint(root + host, false));
    KCORAL_TRY(mount_or_fail(host.c_str(), root + host, nullptr, MS_BIND));
  }
  for (const auto& [link, target] : std::vector<std::pair<std::string, std::string>>{
           {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
           {"stderr", "/proc/self/fd/2"}})
    if (::symlink(target.c_str(), (root + "/dev/" + link).c_str()) != 0) return system_error("linking /dev/" + link);
  KCORAL_TRY(make_directories(root + "/dev/shm"));
  return mount_or_fail((root + kScratch + "/.shm").c_str(), root + "/dev/shm", nullptr, MS_BIND);
}

// /proc of its own PID namespace: no other process in it.
Status mount_proc(const std::string& root) {
  KCORAL_TRY(make_directories(root + "/proc"));
  return mount_or_fail("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC);
}

// Into the new root, which becomes read-only; the old one goes. Then the network namespace's
// loopback, and a host name of its own.
Status pivot_into(const std::string& root) {
  if (::chdir(root.c_str()) != 0) return system_error("chdir to the new root");
  if (::mkdir(".old-root", 0700) != 0) return system_error("mkdir .old-root");
  if (::syscall(SYS_pivot_root, ".", ".old-root") != 0) return system_error("pivot_root");
  if (::chdir("/") != 0) return system_error("chdir /");
  if (::umount2("/.old-root", MNT_DETACH) != 0) return system_error("unmounting the old root");
  if (::rmdir("/.old-root") != 0) return system_error("rmdir /.old-root");
  if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
    return system_error("making the new root read-only");
  KCORAL_TRY(loopback_up());
  if (::sethostname("kcoral", 6) != 0) return system_error("sethostname");
  return {};
}

// Only the descriptors in `keep` stay open; the standard streams read and write nothing.
Status keep_only(std::vector<int> keep) {
  UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null) return system_error("opening /dev/null");
  for (int fd = 0; fd < 3; ++fd)
    if (::dup2(null.get(), fd) < 0) return system_error("redirecting a standard stream");
  keep.push_back(null.get());
  close_descriptors_except(keep, 3);
  return {};
}

// The user: no supplementary groups, then a namespace whose one user the zygote maps to an
// unprivileged one outside (the handshake on `admit`); no capabilities. A root zygote's
// worker makes that namespace as its own outside user (`outside_user`: effective ids only,
// capabilities kept), so that the namespace is that user's: the kernel charges the
// per-user counts of everything inside (inotify instances, processes, user namespaces) to
// the namespace's owner outside, which would otherwise be root. Then, in its control group
// (which `admit` also waited for), the cgroup namespace.
Status become_unprivileged(std::optional<uid_t> outside_user, UniqueFd admit) {
  if (::setgroups(0, nullptr) != 0) return system_error("dropping supplementary groups");
  if (outside_user) {
    if (::setresgid(0, *outside_user, 0) != 0) return system_error("setresgid to the sandbox's user");
    if (::setresuid(0, *outside_user, 0) != 0) return system_error("setresuid to the sandbox's user");
    KCORAL_TRY(raise_effective_capabilities());
  }
  if (::unshare(CLONE_NEWUSER) != 0) return system_error("cannot make the sandbox's user namespace");
  char byte = 'u';
  if (::write(admit.get(), &byte, 1) != 1 || ::read(admit.get(), &byte, 1) != 1 || byte != 'k')
    return fail(ErrorKind::engine, "the zygote did not map the sandbox's user");
  admit.reset();
  if (::unshare(CLONE_NEWCGROUP) != 0) return system_error("cannot make the sandbox's cgroup namespace");
  if (::setresgid(kInsideGid, kInsideGid, kInsideGid) != 0) return system_error("setresgid");
  if (::setresuid(kInsideUid, kInsideUid, kInsideUid) != 0) return system_error("setresuid");
  return drop_capabilities();
}

// The process limits. CUDA reserves address space far beyond memory, so a GPU worker's
// memory is bounded by its data segment instead.
Status apply_limits(const SandboxConfig& config) {
  KCORAL_TRY(check_memory_limit(config.gpu, config.policy.memory_bytes));
  KCORAL_TRY(set_limit(config.gpu ? RLIMIT_DATA : RLIMIT_AS, config.policy.memory_bytes, "memory"));
  KCORAL_TRY(set_limit(RLIMIT_FSIZE, config.policy.file_size_bytes, "file size"));
  KCORAL_TRY(set_limit(RLIMIT_NPROC, config.policy.processes, "processes"));
  KCORAL_TRY(set_limit(RLIMIT_NOFILE, config.policy.open_files, "open files"));
  return set_limit(RLIMIT_CORE, 0, "core dumps");
}

}  // namespace kcoral::sandbox_entry
