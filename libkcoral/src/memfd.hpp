// Memory files as the blobs use them: made sealable, and sealed for good once written.
#pragma once

#include <fcntl.h>

#include <cstddef>
#include <span>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

// Seals that keep a memfd's bytes as they are: no write, no growth, no shrinking.
inline constexpr int kBlobSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;

// A new close-on-exec memfd that can be sealed; `busy` when out of descriptors or memory
// (a condition of the moment, worth a retry).
[[nodiscard]] Result<UniqueFd> new_memfd(const char* name);

// Writes all of `data` at `offset` of the file (pwrite: the file's position is not used).
// Into a memfd this costs about half of copying into a mapping of it, whose every new page
// would fault.
[[nodiscard]] Status write_at(int fd, std::span<const std::byte> data, std::size_t offset);

// Reads all of `out` from `offset` of the file (pread): the kernel copies from the file's
// pages, where copying from a mapping of it faults in each of its pages first. Fails if
// the file ends before.
[[nodiscard]] Status read_at(int fd, std::span<std::byte> out, std::size_t offset);

// Adds kBlobSeals and F_SEAL_SEAL. Fails while any writable shared mapping of it exists.
[[nodiscard]] Status seal_memfd(int fd);
// The same for a file this process still maps, read-only and privately (BlobFile), with
// F_SEAL_FUTURE_WRITE for F_SEAL_WRITE: adding F_SEAL_WRITE waits until the kernel sees no
// page of the file pinned, and a mapped page looks pinned to it (10-13 ms for a 64 MiB
// request body read through its mapping, a sleep). F_SEAL_FUTURE_WRITE refuses every write
// from then on as F_SEAL_WRITE does (write, fallocate, a writable shared mapping, making a
// read-only one writable); what it lets through, a writable shared mapping made before it,
// the file never had.
[[nodiscard]] Status seal_mapped_memfd(int fd);

}  // namespace kcoral
