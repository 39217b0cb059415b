// BlobFile: a memfd mapped writable and grown in place, then cut down to its kept ranges
// and sealed.
#include "kcoral/blob_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>

#include "memfd.hpp"

namespace kcoral {
namespace {

std::size_t page_rounded(std::size_t bytes) {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// Where a file's mapping starts: small enough for an empty-ish body, then doubled.
constexpr std::size_t kFirstMapping = std::size_t{64} << 10;

// Zeroes [offset, offset + size) of the file and frees the pages it covers whole.
Status punch(int fd, std::size_t offset, std::size_t size) {
  if (size == 0) return {};
  if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(size)) != 0)
    return system_error("clearing a request's bytes around its blobs");
  return {};
}

}  // namespace

BlobFile& BlobFile::operator=(BlobFile&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

BlobFile::~BlobFile() { release(); }

void BlobFile::release() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
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
  if (!make_file()) return false;
  std::size_t capacity = page_rounded(bytes);
  // The file grows first, then its mapping over it: the pages are the file's, allocated
  // only as they are written.
  if (::ftruncate(fd_.get(), static_cast<off_t>(capacity)) != 0) return false;
  void* mapped = data_ == nullptr ? ::mmap(nullptr, capacity, PROT_READ, MAP_SHARED, fd_.get(), 0)
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
  // Written by pwrite, read through the mapping: half the cost of copying into the mapping.
  if (!write_at(fd_.get(), std::as_bytes(std::span(bytes)), size_)) return false;
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
  KCORAL_TRY(file.make_file());  // none yet when nothing was written: empty ranges only
  std::size_t end = 0;
  for (const Range& range : ranges) {
    if (range.offset < end || range.size > file.size_ || range.offset > file.size_ - range.size)
      return fail(ErrorKind::engine, "blob ranges out of order or outside the request");
    KCORAL_TRY(punch(file.fd_.get(), end, range.offset - end));
    end = range.offset + range.size;
  }
  // The file ends with the last range, mapped again at that size.
  if (file.data_ != nullptr) ::munmap(file.data_, file.capacity_);
  file.data_ = nullptr;
  file.capacity_ = 0;
  if (::ftruncate(file.fd_.get(), static_cast<off_t>(end)) != 0) return system_error("cutting a request's memfd");
  KCORAL_TRY(seal_memfd(file.fd_.get()));
  auto whole = Blob::map(std::move(file.fd_), end, ranges.size());
  if (!whole) return std::unexpected(whole.error());
  for (const Range& range : ranges) blobs.push_back(*whole->slice(range.offset, range.size));
  return blobs;
}

}  // namespace kcoral
