// Blob over a sealed memfd: written once, sealed against change, mapped read-only.
#include "kcoral/blob.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

#include "kcoral/sha256.hpp"
#include "memfd.hpp"

namespace kcoral {

struct Blob::Mapping {
  UniqueFd fd;
  void* address = nullptr;
  std::size_t mapped = 0;  // from address; the file's size or more
  std::size_t size = 0;
  std::size_t parts = 1;
  ~Mapping() {
    if (address != nullptr) ::munmap(address, mapped);
  }
};

Result<Blob> Blob::copy_of(std::span<const std::byte> data) {
  auto fd = sealed_copy(data);
  if (!fd) return std::unexpected(fd.error());
  return from_fd(std::move(*fd));
}

Result<UniqueFd> Blob::sealed_copy(std::span<const std::byte> data) {
  auto fd = new_memfd("kcoral-blob");
  if (!fd) return std::unexpected(fd.error());
  KCORAL_TRY(write_at(fd->get(), data, 0));
  KCORAL_TRY(seal_memfd(fd->get()));
  return fd;
}

Result<Blob> Blob::copy_of(std::string_view data) {
  return copy_of(std::as_bytes(std::span(data.data(), data.size())));
}

Result<Blob> Blob::from_fd(UniqueFd fd) {
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return system_error("fstat on a blob");
  return map(std::move(fd), static_cast<std::size_t>(info.st_size));
}

Result<Blob> Blob::from_untrusted_fd(UniqueFd fd, std::uint64_t max_bytes) {
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return system_error("fstat on a blob");
  if (!S_ISREG(info.st_mode)) return fail(ErrorKind::engine, "a blob's descriptor is not a regular file");
  int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & kBlobSeals) != kBlobSeals)
    return fail(ErrorKind::engine, "a blob's memfd is not sealed against writing and resizing");
  if (static_cast<std::uint64_t>(info.st_size) > max_bytes)
    return fail(ErrorKind::engine, "a blob of " + std::to_string(info.st_size) + " bytes exceeds the limit of " +
                                       std::to_string(max_bytes));
  return map(std::move(fd), static_cast<std::size_t>(info.st_size));
}

Result<Blob> Blob::map(UniqueFd fd, std::size_t size, std::size_t parts) {
  auto mapping = std::make_shared<Mapping>();
  mapping->size = size;
  mapping->parts = parts;
  if (mapping->size > 0) {
    void* address = ::mmap(nullptr, mapping->size, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (address == MAP_FAILED) return system_error("mapping a blob");
    mapping->address = address;
    mapping->mapped = mapping->size;
  }
  mapping->fd = std::move(fd);
  Blob blob;
  blob.size_ = mapping->size;
  blob.mapping_ = std::move(mapping);
  return blob;
}

Blob Blob::adopt(UniqueFd fd, void* address, std::size_t mapped, std::size_t size, std::size_t parts) {
  auto mapping = std::make_shared<Mapping>();
  mapping->fd = std::move(fd);
  mapping->address = address;
  mapping->mapped = mapped;
  mapping->size = size;
  mapping->parts = parts;
  Blob blob;
  blob.size_ = size;
  blob.mapping_ = std::move(mapping);
  return blob;
}

std::span<const std::byte> Blob::bytes() const {
  if (!mapping_ || mapping_->address == nullptr) return {};
  return {static_cast<const std::byte*>(mapping_->address) + offset_, size_};
}

std::optional<Blob> Blob::slice(std::size_t offset, std::size_t size) const {
  if (offset > size_ || size > size_ - offset) return std::nullopt;
  Blob part = *this;
  part.offset_ = offset_ + offset;
  part.size_ = size;
  return part;
}

Status BlobBuilder::append(std::string_view data) {
  return append(std::as_bytes(std::span(data.data(), data.size())));
}

Status BlobBuilder::append(std::span<const std::byte> data) {
  if (!fd_) {
    auto fd = new_memfd("kcoral-blob");
    if (!fd) return std::unexpected(fd.error());
    fd_ = std::move(*fd);
  }
  static const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  if (data.size() >= page_align_from_ && end_ % page != 0) end_ += page - end_ % page;  // the gap is a hole
  if (auto status = write_at(fd_.get(), data, end_); !status) return status;
  parts_.push_back({end_, data.size(), std::nullopt});
  end_ += data.size();
  bytes_ += data.size();
  return {};
}

void BlobBuilder::append_shared(Blob blob) {
  bytes_ += blob.size();
  parts_.push_back({end_, blob.size(), std::move(blob)});
}

Result<std::vector<std::string>> BlobBuilder::append_hashed(std::span<const std::span<const std::byte>> pieces,
                                                            std::span<const Digested* const> repeats) {
  std::vector<std::string> digests(pieces.size());
  auto repeat = [&](std::size_t i) { return i < repeats.size() ? repeats[i] : nullptr; };
  std::vector<bool> repeated(pieces.size(), false);
  std::vector<std::span<const std::byte>> unknown;
  std::vector<std::size_t> where;
  std::size_t total = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (repeat(i) != nullptr && repeat(i)->blob.equals(pieces[i])) {
      repeated[i] = true;
      digests[i] = repeat(i)->digest;
    } else {
      unknown.push_back(pieces[i]);
      where.push_back(i);
      total += pieces[i].size();
    }
  }
  auto hash_all = [&] {
    std::vector<std::string> hashed = sha256_hex_each(unknown);
    for (std::size_t k = 0; k < where.size(); ++k) digests[where[k]] = std::move(hashed[k]);
  };
  std::jthread hasher;
  if (total >= kHashAlongsideBytes) {
    try {
      hasher = std::jthread(hash_all);
    } catch (const std::system_error&) {  // no thread to be had: one pass after the other
    }
  }
  if (!hasher.joinable()) hash_all();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (repeated[i])
      append_shared(repeat(i)->blob);
    else if (auto status = append(pieces[i]); !status)
      return std::unexpected(status.error());  // the hasher is joined
  }
  if (hasher.joinable()) hasher.join();
  return digests;
}

void BlobBuilder::drop_from(std::size_t count) {
  if (count >= parts_.size()) return;
  for (std::size_t i = count; i < parts_.size(); ++i) bytes_ -= parts_[i].size;
  end_ = parts_[count].offset;
  parts_.resize(count);
  // Should the file not shrink, its tail is bytes no part names, which nobody reads.
  if (fd_) {
    [[maybe_unused]] int cut = ::ftruncate(fd_.get(), static_cast<off_t>(end_));
  }
}

Result<std::vector<Blob>> BlobBuilder::finish() {
  std::vector<Blob> parts;
  std::optional<Blob> whole;
  if (fd_) {
    KCORAL_TRY(seal_memfd(fd_.get()));
    std::size_t written = std::ranges::count_if(parts_, [](const Part& part) { return !part.shared; });
    auto mapped = Blob::map(std::move(fd_), end_, written);
    if (!mapped) return std::unexpected(mapped.error());
    whole = std::move(*mapped);
  }
  for (Part& part : parts_) parts.push_back(part.shared ? std::move(*part.shared) : *whole->slice(part.offset, part.size));
  parts_.clear();
  bytes_ = 0;
  end_ = 0;
  return parts;
}

namespace {

// A large blob is copied out, or compared, in stretches of at least this size, one a thread:
// one core reading 64 MiB out of a memory file is bound by its own copying and by the page
// faults of the memory the bytes go to, not by the memory's bandwidth.
constexpr std::size_t kStretchBytes = std::size_t{8} << 20;
constexpr unsigned kMaxStretches = 8;

// step(begin, end) over [0, size), in stretches run side by side on threads (the caller's
// among them) where the size and the cores allow; whether every stretch's step succeeded.
template <class Step>
bool in_stretches(std::size_t size, Step step) {
  std::size_t count = std::min<std::size_t>(size / kStretchBytes, kMaxStretches);
  if (count > 1) count = std::min<std::size_t>(count, std::max(1u, std::thread::hardware_concurrency()));
  if (count <= 1) return step(0, size);
  std::size_t stretch = (size + count - 1) / count;
  std::atomic<bool> ok{true};
  std::vector<std::jthread> helpers;
  helpers.reserve(count - 1);  // so that only a thread's start can fail below
  for (std::size_t begin = stretch; begin < size; begin += stretch) {
    std::size_t end = std::min(size, begin + stretch);
    try {
      helpers.emplace_back([&ok, &step, begin, end] {
        if (!step(begin, end)) ok = false;
      });
    } catch (const std::system_error&) {  // no more threads: this one does the stretch
      if (!step(begin, end)) ok = false;
    }
  }
  if (!step(0, stretch)) ok = false;
  helpers.clear();  // joined
  return ok;
}

}  // namespace

Status Blob::copy_to(std::span<std::byte> out) const {
  if (out.size() != size_) return fail(ErrorKind::engine, "copying a blob into a buffer of another size");
  if (size_ == 0) return {};
  Status failed;
  std::mutex failure;
  bool ok = in_stretches(size_, [&](std::size_t begin, std::size_t end) {
    Status read = read_at(fd(), out.subspan(begin, end - begin), offset_ + begin);
    if (read) return true;
    std::lock_guard lock(failure);
    failed = std::move(read);
    return false;
  });
  return ok ? Status{} : failed;
}

bool Blob::equals(std::span<const std::byte> data) const {
  if (data.size() != size_) return false;
  return in_stretches(size_, [&](std::size_t begin, std::size_t end) {
    // Small enough to stay in a core's cache between the read and the comparison.
    constexpr std::size_t kStep = std::size_t{256} << 10;
    std::vector<std::byte> buffer(std::min(kStep, end - begin));
    for (std::size_t done = begin; done < end; done += kStep) {
      std::span<std::byte> step(buffer.data(), std::min(kStep, end - done));
      if (!read_at(fd(), step, offset_ + done)) return false;
      if (std::memcmp(step.data(), data.data() + done, step.size()) != 0) return false;
    }
    return true;
  });
}

std::string_view Blob::view() const {
  std::span<const std::byte> b = bytes();
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

int Blob::fd() const { return mapping_ ? mapping_->fd.get() : -1; }

std::size_t Blob::file_size() const { return mapping_ ? mapping_->size : 0; }

std::size_t Blob::file_parts() const { return mapping_ ? mapping_->parts : 0; }

}  // namespace kcoral
