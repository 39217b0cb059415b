// Blob over a sealed memfd: written once, sealed against change, mapped read-only.
#include "kcoral/blob.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kcoral {

struct Blob::Mapping {
  UniqueFd fd;
  void* address = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (address != nullptr) ::munmap(address, size);
  }
};

namespace {

std::unexpected<Error> system_error(std::string_view what) {
  return fail(ErrorKind::engine, std::string(what) + ": " + std::strerror(errno));
}

}  // namespace

Result<Blob> Blob::copy_of(std::span<const std::byte> data) {
  UniqueFd fd(::memfd_create("kcoral-blob", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return system_error("memfd_create");
  std::size_t written = 0;
  while (written < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return system_error("writing a blob");
    written += static_cast<std::size_t>(n);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return system_error("sealing a blob");
  return from_fd(std::move(fd));
}

Result<Blob> Blob::copy_of(std::string_view data) {
  return copy_of(std::as_bytes(std::span(data.data(), data.size())));
}

Result<Blob> Blob::from_fd(UniqueFd fd) {
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return system_error("fstat on a blob");
  auto mapping = std::make_shared<Mapping>();
  mapping->size = static_cast<std::size_t>(info.st_size);
  if (mapping->size > 0) {
    void* address = ::mmap(nullptr, mapping->size, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (address == MAP_FAILED) return system_error("mapping a blob");
    mapping->address = address;
  }
  mapping->fd = std::move(fd);
  Blob blob;
  blob.mapping_ = std::move(mapping);
  return blob;
}

std::span<const std::byte> Blob::bytes() const {
  if (!mapping_ || mapping_->address == nullptr) return {};
  return {static_cast<const std::byte*>(mapping_->address), mapping_->size};
}

std::string_view Blob::view() const {
  std::span<const std::byte> b = bytes();
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

int Blob::fd() const { return mapping_ ? mapping_->fd.get() : -1; }

}  // namespace kcoral
