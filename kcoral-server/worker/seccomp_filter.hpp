// The seccomp filter of a sandboxed worker: what a benchmark never needs is refused.
//
// Everything else is allowed: programs compile (nvcc, Triton, TVM run compilers), start
// processes and threads, map memory and talk to the GPU driver. Refused, with EPERM:
// debugging and reading other processes (ptrace, process_vm_readv/writev,
// pidfd_getfd, kcmp), the kernel's own business (modules, kexec, reboot, swap, clock and
// time, quotas, accounting, syslog, keyrings, BPF, perf events, userfaultfd, io_uring,
// handles to files by number), file systems and namespaces (mount and its new API,
// pivot_root, chroot, unshare and setns, and clone with a namespace flag; clone3 answers
// ENOSYS so that libc falls back to clone, whose flags can be checked). Compiled once,
// by the zygote (libseccomp takes most of a millisecond), and loaded by each worker after
// no_new_privs: it then applies to the worker and every thread and process it starts.
//
//   auto filter = SeccompFilter::compile();   // zygote
//   filter->load();                           // worker
#pragma once

#include <linux/filter.h>

#include <vector>

#include "kcoral/error.hpp"

namespace kcoral {

class SeccompFilter {
 public:
  [[nodiscard]] static Result<SeccompFilter> compile();
  // Installs the filter on the calling thread (and what it starts); needs no_new_privs.
  [[nodiscard]] Status load() const;

 private:
  std::vector<sock_filter> program_;  // BPF, as libseccomp made it
};

}  // namespace kcoral
