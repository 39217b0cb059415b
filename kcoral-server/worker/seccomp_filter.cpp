// The filter, through libseccomp: default allow, a list of refusals, exported as BPF.
#include "seccomp_filter.hpp"

#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "kcoral/unique_fd.hpp"

namespace kcoral {
namespace {

constexpr const char* kRefused[] = {
    // other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    // the kernel's own business
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "quotactl", "quotactl_fd", "acct", "syslog",
    "add_key", "request_key", "keyctl", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "open_by_handle_at", "name_to_handle_at", "lookup_dcookie",
    "nfsservctl", "uselib", "vhangup", "iopl", "ioperm", "fanotify_init",
    // file systems and namespaces
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick", "open_tree",
    "move_mount", "mount_setattr", "setns"};

constexpr std::uint64_t kNamespaceFlags[] = {CLONE_NEWNS,  CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
                                             CLONE_NEWIPC, CLONE_NEWUTS,  CLONE_NEWCGROUP, CLONE_NEWTIME};

struct Release {
  void operator()(scmp_filter_ctx context) const { seccomp_release(context); }
};

Status failed(const std::string& what, int rc) {
  return fail(ErrorKind::engine, "seccomp: " + what + ": " + std::strerror(-rc));
}

}  // namespace

Result<SeccompFilter> SeccompFilter::compile() {
  std::unique_ptr<void, Release> context(seccomp_init(SCMP_ACT_ALLOW));
  if (!context) return fail(ErrorKind::engine, "seccomp: cannot make a filter");
  for (const char* name : kRefused) {
    int call = seccomp_syscall_resolve_name(name);
    if (call == __NR_SCMP_ERROR) continue;  // not a system call of this architecture
    if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(EPERM), call, 0); rc < 0)
      return std::unexpected(failed(name, rc).error());
  }
  // unshare and clone: a thread may keep its files or directory to itself, but no call
  // makes a namespace (one rule per flag: a rule compares one masked value).
  for (std::uint64_t flag : kNamespaceFlags) {
    for (int call : {SCMP_SYS(unshare), SCMP_SYS(clone)}) {
      if (call == SCMP_SYS(clone) && flag == CLONE_NEWTIME) continue;  // clone's low byte is its signal
      if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(EPERM), call, 1,
                                    SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
          rc < 0)
        return std::unexpected(failed("a namespace flag", rc).error());
    }
  }
  if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc < 0)
    return std::unexpected(failed("clone3", rc).error());
  // The BPF program, through a memfd (libseccomp exports to a descriptor).
  UniqueFd exported(::memfd_create("kcoral-seccomp", MFD_CLOEXEC));
  if (!exported) return fail(ErrorKind::engine, "seccomp: memfd_create failed");
  if (int rc = seccomp_export_bpf(context.get(), exported.get()); rc < 0)
    return std::unexpected(failed("exporting the filter", rc).error());
  struct stat info {};
  if (::fstat(exported.get(), &info) != 0 || info.st_size % sizeof(sock_filter) != 0)
    return fail(ErrorKind::engine, "seccomp: the exported filter is malformed");
  SeccompFilter filter;
  filter.program_.resize(static_cast<std::size_t>(info.st_size) / sizeof(sock_filter));
  if (::pread(exported.get(), filter.program_.data(), static_cast<std::size_t>(info.st_size), 0) != info.st_size)
    return fail(ErrorKind::engine, "seccomp: cannot read the exported filter");
  return filter;
}

Status SeccompFilter::load() const {
  sock_fprog program{static_cast<unsigned short>(program_.size()), const_cast<sock_filter*>(program_.data())};
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0)
    return fail(ErrorKind::engine, std::string("seccomp: loading the filter: ") + std::strerror(errno));
  return {};
}

}  // namespace kcoral
