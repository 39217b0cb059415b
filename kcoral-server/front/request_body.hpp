// RequestBody: the Beast body type of a request, its bytes in memory that grows without a
// copy.
//
// A chunked body does not say its length, so its buffer must grow as it arrives. A
// std::string grows by allocating anew and copying: near the request limit, the old and
// the new buffers are both resident (a 256 MiB body peaked at twice that). Here the bytes
// live in an anonymous mapping that mremap(2) enlarges in place or moves by its page
// tables, never by copying, so a body costs what it holds, chunked or not. A body of
// declared length is mapped once at that length. Reading a request (the router, the
// multipart parser) sees one contiguous std::string_view.
//
//   boost::beast::http::request_parser<kcoral::RequestBody> parser;
//   std::string_view bytes = parser.get().body();
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <cstdint>
#include <string_view>
#include <utility>

namespace kcoral {

// Bytes in an anonymous mapping, grown by mremap. Move-only; not thread-safe.
class MappedBytes {
 public:
  MappedBytes() = default;
  MappedBytes(const MappedBytes&) = delete;
  MappedBytes& operator=(const MappedBytes&) = delete;
  MappedBytes(MappedBytes&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  MappedBytes& operator=(MappedBytes&& other) noexcept;
  ~MappedBytes();

  // Room for `bytes` in all; false when the kernel has no memory for it.
  [[nodiscard]] bool reserve(std::size_t bytes);
  // Appends, growing by doubling; false when out of memory (nothing appended).
  [[nodiscard]] bool append(std::string_view bytes);
  // Replaces the contents (tests build requests so); throws std::bad_alloc when out of memory.
  MappedBytes& operator=(std::string_view bytes);

  [[nodiscard]] const char* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] std::size_t capacity() const { return capacity_; }
  [[nodiscard]] std::string_view view() const { return {data_, size_}; }
  operator std::string_view() const { return view(); }  // NOLINT: reads as the bytes it holds

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

struct RequestBody {
  using value_type = MappedBytes;

  static std::uint64_t size(const value_type& body) { return body.size(); }

  // Parsing: a declared length is mapped at once; chunks are appended as they come.
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>& content_length, boost::beast::error_code& ec);
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      std::size_t put = 0;
      for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers);
           ++it) {
        boost::asio::const_buffer buffer = *it;
        if (!body_.append({static_cast<const char*>(buffer.data()), buffer.size()})) {
          ec = boost::beast::error_code(ENOMEM, boost::beast::generic_category());
          return put;
        }
        put += buffer.size();
      }
      ec = {};
      return put;
    }
    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };

  // Serializing (tests write requests too): the bytes in one buffer.
  class writer {
   public:
    using const_buffers_type = boost::asio::const_buffer;

    template <bool isRequest, class Fields>
    writer(const boost::beast::http::header<isRequest, Fields>&, const value_type& body) : body_(body) {}

    void init(boost::beast::error_code& ec) { ec = {}; }
    boost::optional<std::pair<const_buffers_type, bool>> get(boost::beast::error_code& ec) {
      ec = {};
      return std::pair{const_buffers_type(body_.data(), body_.size()), false};
    }

   private:
    const value_type& body_;
  };
};

}  // namespace kcoral
