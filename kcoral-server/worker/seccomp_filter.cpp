// The filter, through libseccomp: default allow, a list of refusals.
#include "seccomp_filter.hpp"

#include <sched.h>
#include <seccomp.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

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

Status install_seccomp_filter() {
  std::unique_ptr<void, Release> context(seccomp_init(SCMP_ACT_ALLOW));
  if (!context) return fail(ErrorKind::engine, "seccomp: cannot make a filter");
  for (const char* name : kRefused) {
    int call = seccomp_syscall_resolve_name(name);
    if (call == __NR_SCMP_ERROR) continue;  // not a system call of this architecture
    if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(EPERM), call, 0); rc < 0) return failed(name, rc);
  }
  // unshare and clone: a thread may keep its files or directory to itself, but no call
  // makes a namespace (one rule per flag: a rule compares one masked value).
  for (std::uint64_t flag : kNamespaceFlags) {
    for (int call : {SCMP_SYS(unshare), SCMP_SYS(clone)}) {
      if (call == SCMP_SYS(clone) && flag == CLONE_NEWTIME) continue;  // clone's low byte is its signal
      if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(EPERM), call, 1,
                                    SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
          rc < 0)
        return failed("a namespace flag", rc);
    }
  }
  if (int rc = seccomp_rule_add(context.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc < 0)
    return failed("clone3", rc);
  if (int rc = seccomp_load(context.get()); rc < 0) return failed("loading the filter", rc);
  return {};
}

}  // namespace kcoral
