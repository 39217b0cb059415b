// The new mount API's system calls (Linux 5.2 and 5.12), called directly.
//
// glibc wraps open_tree, move_mount and mount_setattr only from 2.36; calling the kernel
// ourselves keeps the server's manylinux wheel at glibc 2.34 (Ubuntu 22.04, RHEL 9 and
// later) rather than 2.36. The types and flags still come from <sys/mount.h>. Each
// returns what the system call does: -1 with errno on failure.
#pragma once

#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace kcoral::mount_calls {

inline int open_tree(int directory, const char* path, unsigned flags) {
  return static_cast<int>(::syscall(SYS_open_tree, directory, path, flags));
}

inline int move_mount(int from_directory, const char* from_path, int to_directory, const char* to_path,
                      unsigned flags) {
  return static_cast<int>(::syscall(SYS_move_mount, from_directory, from_path, to_directory, to_path, flags));
}

inline int mount_setattr(int directory, const char* path, unsigned flags, mount_attr* attributes) {
  return static_cast<int>(::syscall(SYS_mount_setattr, directory, path, flags, attributes, sizeof *attributes));
}

}  // namespace kcoral::mount_calls
