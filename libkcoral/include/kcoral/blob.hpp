// Blob: immutable bytes held in a sealed memory file, shareable with another process by
// passing its descriptor.
//
// The server keeps each uploaded blob in one memfd and hands the descriptor to the worker
// that runs the program, so large inputs reach the worker without being copied through a
// pipe. Copies of a Blob share the same mapping; the mapping lives until the last copy is
// gone. A Blob may also be a slice of a larger memfd (BlobBuilder makes those: many
// parts behind one descriptor). Thread-safe to read and copy.
//   kcoral::Result<kcoral::Blob> blob = kcoral::Blob::copy_of(bytes);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

class Blob {
 public:
  Blob() = default;
  // Copies `data` into a new sealed memfd.
  [[nodiscard]] static Result<Blob> copy_of(std::span<const std::byte> data);
  [[nodiscard]] static Result<Blob> copy_of(std::string_view data);
  // The same memfd, sealed as a Blob's is, but not mapped here: for bytes this process only
  // hands to another. A mapping made and removed again costs this process's other threads
  // a TLB flush each.
  [[nodiscard]] static Result<UniqueFd> sealed_copy(std::span<const std::byte> data);
  // Maps a memfd received from a trusted process (read-only, whole file).
  [[nodiscard]] static Result<Blob> from_fd(UniqueFd fd);
  // Maps a descriptor received from a process that is not trusted, only if it is a regular
  // file sealed against writing, growing and shrinking (so the mapping cannot change
  // under the reader or fault) and at most `max_bytes` long; checked before mapping.
  [[nodiscard]] static Result<Blob> from_untrusted_fd(UniqueFd fd, std::uint64_t max_bytes);

  [[nodiscard]] std::span<const std::byte> bytes() const;
  // Copies the blob into `out` (exactly size() bytes) by reading its memfd, not its
  // mapping: the kernel copies from the file's pages without faulting each into this
  // process first (a 64 MiB blob made into a Python bytes: see benchmarks/README.md).
  [[nodiscard]] Status copy_to(std::span<std::byte> out) const;
  // Whether `data` holds exactly the blob's bytes, read from its memfd as copy_to reads
  // them, a cache-sized piece at a time; false too where the memfd cannot be read.
  [[nodiscard]] bool equals(std::span<const std::byte> data) const;
  [[nodiscard]] std::string_view view() const;
  [[nodiscard]] std::size_t size() const { return size_; }
  // The memfd behind the blob (a slice shares its whole memfd), to pass to another
  // process; stays owned by the Blob. -1 for an empty Blob.
  [[nodiscard]] int fd() const;
  // Where the blob starts in that memfd (0 unless a slice).
  [[nodiscard]] std::size_t offset() const { return offset_; }
  // The size of that whole memfd: the memory this blob keeps alive.
  [[nodiscard]] std::size_t file_size() const;
  // How many blobs that memfd was made of (BlobBuilder's parts; 1 otherwise).
  [[nodiscard]] std::size_t file_parts() const;
  // `size` bytes from `offset` of this blob, sharing its mapping; nullopt when out of range.
  [[nodiscard]] std::optional<Blob> slice(std::size_t offset, std::size_t size) const;

 private:
  friend class BlobBuilder;
  friend class BlobFile;
  struct Mapping;
  static Result<Blob> map(UniqueFd fd, std::size_t size, std::size_t parts = 1);
  // A sealed memfd of `size` bytes already mapped read-only at `address`, `mapped` bytes
  // long (its size or more), which the last copy unmaps.
  static Blob adopt(UniqueFd fd, void* address, std::size_t mapped, std::size_t size, std::size_t parts);
  std::shared_ptr<const Mapping> mapping_;
  std::size_t offset_ = 0;
  std::size_t size_ = 0;
};

// BlobBuilder: many byte strings appended to one memfd, then sealed and handed out as
// slices of it, in order: one descriptor for all the parts of a request or a result however
// many there are. Parts of at least `page_align_from` bytes start on a page boundary, so
// that a process can map them on their own (the gap is a hole: no memory); the others are
// packed back to back. A Blob may be appended as it is among them (append_shared). Not
// thread-safe.
//   kcoral::BlobBuilder parts;
//   parts.append(bytes);                 // Status
//   auto digests = parts.append_hashed(pieces);  // Result<std::vector<std::string>>
//   auto blobs = parts.finish();         // Result<std::vector<Blob>>
class BlobBuilder {
 public:
  static constexpr std::size_t kPacked = SIZE_MAX;
  // Parts at least this large are page-aligned when the builder is asked to.
  static constexpr std::size_t kMappableFrom = std::size_t{64} << 10;
  explicit BlobBuilder(std::size_t page_align_from = kPacked) : page_align_from_(page_align_from) {}

  [[nodiscard]] Status append(std::span<const std::byte> data);
  [[nodiscard]] Status append(std::string_view data);
  // A blob whose SHA-256 is known, which a piece given to append_hashed may repeat.
  struct Digested {
    Blob blob;
    std::string digest;
  };
  // Appends each of `pieces` and returns their SHA-256 digests (sha256_hex), in order.
  // From kHashAlongsideBytes in all, the digests are computed on a thread of their own
  // while the pieces are copied into the memfd: each pass reads every byte once, and
  // together they take the time of the slower, the hash, instead of both. The digests are
  // of the bytes as they were read for hashing, so `pieces` must not change meanwhile.
  // `repeats`, empty or one per piece: a blob the piece may be a copy of (or nullptr). A
  // piece found byte for byte equal to its blob is that blob, appended shared (neither
  // copied nor hashed: it takes the blob's digest); comparing runs at memory speed, several
  // times SHA-256's and the copy's.
  [[nodiscard]] Result<std::vector<std::string>> append_hashed(std::span<const std::span<const std::byte>> pieces,
                                                               std::span<const Digested* const> repeats = {});
  static constexpr std::size_t kHashAlongsideBytes = std::size_t{1} << 20;
  // Appends `blob` itself as the next part: finish() gives it back as it is, sharing its
  // memfd; nothing is copied.
  void append_shared(Blob blob);
  // Forgets the parts appended after the first `count`, as if they never were.
  void drop_from(std::size_t count);
  [[nodiscard]] std::size_t count() const { return parts_.size(); }
  [[nodiscard]] std::uint64_t bytes() const { return bytes_; }
  // Seals the memfd and returns one part per append, in order: a slice of it, or the shared
  // blob (none when nothing was appended).
  [[nodiscard]] Result<std::vector<Blob>> finish();

 private:
  std::size_t page_align_from_;
  UniqueFd fd_;
  struct Part {
    std::size_t offset;  // in the memfd; for a shared one, where the next written part goes
    std::size_t size;
    std::optional<Blob> shared;  // append_shared's
  };
  std::vector<Part> parts_;
  std::uint64_t bytes_ = 0;  // appended: the parts' sizes
  std::size_t end_ = 0;      // of the file, holes included
};

}  // namespace kcoral
