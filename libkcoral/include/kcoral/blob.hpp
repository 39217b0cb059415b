// Blob: immutable bytes held in a sealed memory file, shareable with another process by
// passing its descriptor.
//
// The server keeps each uploaded blob in one memfd and hands the descriptor to the worker
// that runs the program, so large inputs reach the worker without being copied through a
// pipe. Copies of a Blob share the same mapping; the mapping lives until the last copy is
// gone. Thread-safe to read and copy.
//   kcoral::Result<kcoral::Blob> blob = kcoral::Blob::copy_of(bytes);
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

class Blob {
 public:
  Blob() = default;
  // Copies `data` into a new sealed memfd.
  [[nodiscard]] static Result<Blob> copy_of(std::span<const std::byte> data);
  [[nodiscard]] static Result<Blob> copy_of(std::string_view data);
  // Maps a memfd received from another process (read-only, whole file).
  [[nodiscard]] static Result<Blob> from_fd(UniqueFd fd);

  [[nodiscard]] std::span<const std::byte> bytes() const;
  [[nodiscard]] std::string_view view() const;
  [[nodiscard]] std::size_t size() const { return bytes().size(); }
  // The memfd, to pass to another process; stays owned by the Blob. -1 for an empty Blob.
  [[nodiscard]] int fd() const;

 private:
  struct Mapping;
  std::shared_ptr<const Mapping> mapping_;
};

}  // namespace kcoral
