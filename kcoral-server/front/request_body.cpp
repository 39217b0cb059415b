// RequestBody: the mapping behind a request's bytes, and how it grows.
#include "request_body.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>

namespace kcoral {
namespace {

std::size_t page_rounded(std::size_t bytes) {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// Where a body's mapping starts: small enough for an empty-ish request, then doubled.
constexpr std::size_t kFirstMapping = std::size_t{64} << 10;

}  // namespace

MappedBytes& MappedBytes::operator=(MappedBytes&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, capacity_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

MappedBytes::~MappedBytes() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
}

bool MappedBytes::reserve(std::size_t bytes) {
  if (bytes <= capacity_) return true;
  std::size_t capacity = page_rounded(bytes);
  void* mapped = data_ == nullptr ? ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                                  : ::mremap(data_, capacity_, capacity, MREMAP_MAYMOVE);
  if (mapped == MAP_FAILED) return false;
  data_ = static_cast<char*>(mapped);
  capacity_ = capacity;
  return true;
}

bool MappedBytes::append(std::string_view bytes) {
  if (bytes.empty()) return true;
  if (bytes.size() > capacity_ - size_) {
    std::size_t wanted = size_ + bytes.size();
    if (wanted < size_) return false;  // overflow
    if (!reserve(std::max({wanted, 2 * capacity_, kFirstMapping}))) return false;
  }
  std::memcpy(data_ + size_, bytes.data(), bytes.size());
  size_ += bytes.size();
  return true;
}

MappedBytes& MappedBytes::operator=(std::string_view bytes) {
  size_ = 0;
  if (!append(bytes)) throw std::bad_alloc();
  return *this;
}

void RequestBody::reader::init(const boost::optional<std::uint64_t>& content_length, boost::beast::error_code& ec) {
  ec = {};
  if (content_length && !body_.reserve(static_cast<std::size_t>(*content_length)))
    ec = boost::beast::error_code(ENOMEM, boost::beast::generic_category());
}

}  // namespace kcoral
