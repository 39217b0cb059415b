// Memory files as the blobs use them.
#include "memfd.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kcoral {

Result<UniqueFd> new_memfd(const char* name) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd && (errno == EMFILE || errno == ENFILE || errno == ENOMEM))
    return fail(ErrorKind::busy, std::string("no memory file for the blobs (") + std::strerror(errno) +
                                     "); retry later");
  if (!fd) return system_error("memfd_create");
  return fd;
}

Status write_at(int fd, std::span<const std::byte> data, std::size_t offset) {
  std::size_t written = 0;
  while (written < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + written, data.size() - written, static_cast<off_t>(offset + written));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return system_error("writing a blob");
    written += static_cast<std::size_t>(n);
  }
  return {};
}

Status read_at(int fd, std::span<std::byte> out, std::size_t offset) {
  std::size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_error("reading a blob");
    if (n == 0) return fail(ErrorKind::engine, "a blob's file ends before the blob");
    done += static_cast<std::size_t>(n);
  }
  return {};
}

Status seal_memfd(int fd) {
  if (::fcntl(fd, F_ADD_SEALS, kBlobSeals | F_SEAL_SEAL) != 0) return system_error("sealing a blob");
  return {};
}

Status seal_mapped_memfd(int fd) {
  constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
  if (::fcntl(fd, F_ADD_SEALS, kSeals) != 0) return system_error("sealing a blob");
  return {};
}

}  // namespace kcoral
