// BlobFile: a memfd mapped writable and grown in place, then cut down to its kept ranges
// and sealed.
#include "kcoral/blob_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <new>

#include "memfd.hpp"

namespace kcoral {
namespace {

std::size_t page_size() {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

std::size_t page_rounded(std::size_t bytes) { return (bytes + page_size() - 1) / page_size() * page_size(); }

// Where a body's room starts: small enough for an empty-ish body, then doubled.
constexpr std::size_t kFirstMapping = std::size_t{64} << 10;
// Bodies up to this size are held in memory, and a memfd is made only for the blobs they
// keep: a trivial program's request needs none, and making, mapping, unmapping and closing
// one (the unmapping flushing the TLBs of the front's other threads) took about 40% of its
// admission on an idle server (benchmarks/README.md, "A spinning courier": an idle server).
constexpr std::size_t kInMemoryBytes = kFirstMapping;

Status write_zeros(int fd, std::size_t offset, std::size_t size) {
  static const std::array<std::byte, 4096> kZeros{};
  for (std::size_t done = 0; done < size;) {
    std::size_t piece = std::min(size - done, kZeros.size());
    KCORAL_TRY(write_at(fd, std::span(kZeros).first(piece), offset + done));
    done += piece;
  }
  return {};
}

// Zeroes [offset, offset + size) of the file and frees the pages it covers whole; the
// pieces of pages at its ends are overwritten with zeros. (Punching a range that ends in
// the file's first page, as the bytes before a request's first blob do, has the kernel
// unmap the whole file from every mapping of it: its rounded range ends before it starts,
// read as "to the end of the file". The body's mapping, read through by the digests'
// thread, then cost 5-8 ms to take down for 64 MiB.)
Status clear(int fd, std::size_t offset, std::size_t size) {
  std::size_t end = offset + size;
  std::size_t first = std::min(end, page_rounded(offset));  // the whole pages' start
  std::size_t last = std::max(first, end / page_size() * page_size());  // and end
  KCORAL_TRY(write_zeros(fd, offset, first - offset));
  if (last > first && ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first),
                                  static_cast<off_t>(last - first)) != 0)
    return system_error("clearing a request's bytes around its blobs");
  return write_zeros(fd, last, end - last);
}

}  // namespace

BlobFile& BlobFile::operator=(BlobFile&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::move(other.fd_);
    memory_ = std::move(other.memory_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

BlobFile::~BlobFile() { release(); }

void BlobFile::release() {
  if (memory_) memory_.reset();
  else if (data_ != nullptr) ::munmap(data_, capacity_);
  data_ = nullptr;
  size_ = 0;
  capacity_ = 0;
  fd_.reset();
}

Status BlobFile::make_file() {
  if (fd_) return {};
  auto fd = new_memfd("kcoral-request");
  if (!fd) return std::unexpected(fd.error());
  fd_ = std::move(*fd);
  return {};
}

bool BlobFile::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return true;
  std::size_t capacity = page_rounded(bytes);
  if (!fd_ && capacity <= kInMemoryBytes) {
    std::unique_ptr<char[]> memory(new (std::nothrow) char[capacity]);
    if (!memory) return false;
    if (size_ > 0) std::memcpy(memory.get(), data_, size_);
    memory_ = std::move(memory);
    data_ = memory_.get();
    capacity_ = capacity;
    return true;
  }
  if (!make_file()) return false;
  // The file grows first, then its mapping over it: the pages are the file's, allocated
  // only as they are written. The mapping is private: never written through, it reads
  // every write to the file, and unlike a shared one (which could be made writable) it
  // does not keep the file from being sealed against writing, so keep() gives it to the
  // blobs.
  if (::ftruncate(fd_.get(), static_cast<off_t>(capacity)) != 0) return false;
  if (memory_) {  // out of memory into the file: what the memory held is written there first
    void* mapped = ::mmap(nullptr, capacity, PROT_READ, MAP_PRIVATE, fd_.get(), 0);
    if (mapped == MAP_FAILED) return false;
    if (!write_at(fd_.get(), std::as_bytes(std::span(data_, size_)), 0)) {
      ::munmap(mapped, capacity);
      return false;
    }
    memory_.reset();
    data_ = static_cast<char*>(mapped);
    capacity_ = capacity;
    return true;
  }
  void* mapped = data_ == nullptr ? ::mmap(nullptr, capacity, PROT_READ, MAP_PRIVATE, fd_.get(), 0)
                                  : ::mremap(data_, capacity_, capacity, MREMAP_MAYMOVE);
  if (mapped == MAP_FAILED) {
    // The file back to its mapping's size; should that fail too, keep() cuts it anyway.
    [[maybe_unused]] int undone = ::ftruncate(fd_.get(), static_cast<off_t>(capacity_));
    return false;
  }
  data_ = static_cast<char*>(mapped);
  capacity_ = capacity;
  return true;
}

bool BlobFile::append(std::string_view bytes) {
  if (bytes.empty()) return true;
  if (bytes.size() > capacity_ - size_) {
    std::size_t wanted = size_ + bytes.size();
    if (wanted < size_) return false;  // overflow
    if (!reserve(std::max({wanted, 2 * capacity_, kFirstMapping}))) return false;
  }
  // Into a file by pwrite, read through the mapping: half the cost of copying into the mapping.
  if (memory_) std::memcpy(data_ + size_, bytes.data(), bytes.size());
  else if (!write_at(fd_.get(), std::as_bytes(std::span(bytes)), size_)) return false;
  size_ += bytes.size();
  return true;
}

BlobFile& BlobFile::operator=(std::string_view bytes) {
  size_ = 0;
  if (!append(bytes)) throw std::bad_alloc();
  return *this;
}

Result<std::vector<Blob>> BlobFile::keep(std::span<const Range> ranges) {
  BlobFile file = std::move(*this);  // empty afterwards, whatever happens
  std::vector<Blob> blobs;
  if (ranges.empty()) return blobs;
  std::size_t end = 0;
  for (const Range& range : ranges) {
    if (range.offset < end || range.size > file.size_ || range.offset > file.size_ - range.size)
      return fail(ErrorKind::engine, "blob ranges out of order or outside the request");
    end = range.offset + range.size;
  }
  if (file.memory_ || !file.fd_) {
    // Held in memory (or never written): a new file with the ranges at their offsets, the
    // rest of it holes, which read as zeros.
    KCORAL_TRY(file.make_file());
    if (::ftruncate(file.fd_.get(), static_cast<off_t>(end)) != 0) return system_error("sizing a request's memfd");
    for (const Range& range : ranges) {
      auto bytes = std::as_bytes(std::span(file.data_ + range.offset, range.size));
      KCORAL_TRY(write_at(file.fd_.get(), bytes, range.offset));
    }
  } else {
    std::size_t kept_to = 0;
    for (const Range& range : ranges) {
      KCORAL_TRY(clear(file.fd_.get(), kept_to, range.offset - kept_to));
      kept_to = range.offset + range.size;
    }
    // The file ends with the last range.
    if (::ftruncate(file.fd_.get(), static_cast<off_t>(end)) != 0) return system_error("cutting a request's memfd");
  }
  // The file's mapping, read-only, stays the blobs' (past the file's end it is never read):
  // taking down a mapping the digests' thread read through costs 5-8 ms for 64 MiB, paid
  // when the blobs go rather than while the program waits to start.
  bool mapped = file.data_ != nullptr && !file.memory_;
  KCORAL_TRY(mapped ? seal_mapped_memfd(file.fd_.get()) : seal_memfd(file.fd_.get()));
  Result<Blob> whole = mapped ? Blob::adopt(std::move(file.fd_), std::exchange(file.data_, nullptr),
                                            std::exchange(file.capacity_, 0), end, ranges.size())
                              : Blob::map(std::move(file.fd_), end, ranges.size());
  if (!whole) return std::unexpected(whole.error());
  for (const Range& range : ranges) blobs.push_back(*whole->slice(range.offset, range.size));
  return blobs;
}

}  // namespace kcoral
