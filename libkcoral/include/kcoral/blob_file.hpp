// BlobFile: bytes written into a memory file as they arrive, then kept as Blobs without a
// copy.
//
// A request body is received straight into a memfd, written with pwrite and read through
// a mapping, both grown in place (ftruncate and mremap: never copied, so a body costs what
// it holds, however it arrives). Once the body is read, its blob parts are kept: every
// byte outside them is zeroed and its pages freed, the file is sealed, and each part
// becomes a Blob that is a slice of it. The server then hands that one descriptor to the
// worker without having copied the upload a second time, and the worker can read the
// blobs and nothing else of the request (its framing and its program text are zeros by
// then). A body of up to 64 KiB is held in memory instead, and a memfd made only for the
// blobs it keeps, each written at its offset and the rest of the file holes: the same
// file as the worker sees it, without a memfd for a body that keeps no blob.
//
//   kcoral::BlobFile body;
//   body.append(bytes);                                   // as they arrive; false: no memory
//   auto blobs = body.keep({{offset, size}, ...});        // Result<std::vector<Blob>>
//
// Move-only; not thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kcoral/blob.hpp"
#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

class BlobFile {
 public:
  // Bytes [offset, offset + size) of the file.
  struct Range {
    std::size_t offset = 0;
    std::size_t size = 0;
  };

  BlobFile() = default;
  BlobFile(const BlobFile&) = delete;
  BlobFile& operator=(const BlobFile&) = delete;
  BlobFile(BlobFile&& other) noexcept
      : fd_(std::move(other.fd_)),
        memory_(std::move(other.memory_)),
        data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  BlobFile& operator=(BlobFile&& other) noexcept;
  ~BlobFile();

  // Room for `bytes` in all; false when no memory file or memory is to be had for it.
  [[nodiscard]] bool reserve(std::size_t bytes);
  // Appends, growing by doubling; false when out of memory (nothing appended).
  [[nodiscard]] bool append(std::string_view bytes);
  // Replaces the contents (tests build bodies so); throws std::bad_alloc when out of memory.
  BlobFile& operator=(std::string_view bytes);

  [[nodiscard]] const char* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::size_t capacity() const { return capacity_; }
  // The memory file, for a reader of its own; it stays the BlobFile's. -1 while the bytes
  // are held in memory: a body is, up to 64 KiB (reserve() of more makes the file).
  [[nodiscard]] int fd() const { return fd_.get(); }
  [[nodiscard]] std::string_view view() const { return {data_, size_}; }
  operator std::string_view() const { return view(); }  // NOLINT: reads as the bytes it holds

  // Keeps `ranges` of the bytes (in increasing order, not overlapping, within size()) as
  // one Blob each, in order, slices of one sealed memfd; zeroes the rest and frees its
  // pages. The BlobFile is empty afterwards, whatever the outcome. No ranges: no Blobs.
  [[nodiscard]] Result<std::vector<Blob>> keep(std::span<const Range> ranges);

 private:
  void release();
  [[nodiscard]] Status make_file();  // the memfd, made on first need

  UniqueFd fd_;
  std::unique_ptr<char[]> memory_;  // a small body's bytes, until it grows past them
  char* data_ = nullptr;            // memory_'s, or the file's mapping
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace kcoral
