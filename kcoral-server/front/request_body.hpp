// RequestBody: the Beast body type of a request, its bytes received straight into a memory
// file (kcoral::ReceivedRequestBody: a BlobFile, and the digests of its multipart parts).
//
// A body of declared length is mapped once at that length; a chunked body, which does not
// say its length, grows as it arrives, in place, never by copying (a std::string would
// hold the old and the new buffer at once near the request limit). Each multipart part is
// hashed as it arrives, so that an upload's digest is ready with its last byte: after each
// read on the session's thread, or for a declared length from PartHasher::kFromBytes on a
// thread of its own that follows the writes (part_hasher.hpp), so that reading and hashing
// run side by side; the body is handed on without waiting for that thread to catch up
// (ReceivedRequestBody::settled). The blobs of an /execute body stay in that file as the
// worker's input (parse_execute_request), so the upload is neither hashed nor copied
// again. Reading a request (the router, the multipart parser) sees one contiguous
// std::string_view.
//
//   boost::beast::http::request_parser<kcoral::RequestBody> parser;
//   std::string_view bytes = parser.get().body().bytes.view();
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>

#include "kcoral/codec.hpp"
#include "part_hasher.hpp"

namespace kcoral {

// A request's body as the session hands it on: what was received, and, for a large one,
// the hashing of its parts, which may still be catching up with the last bytes read.
// settled() waits for that hashing and gives the body with all its digests; the router
// calls it where the admission runs, on a long-step thread for such a body
// (admission_takes_long), so that no I/O thread ever waits for a hash.
struct ReceivedRequestBody : ReceivedBody {
  std::unique_ptr<PartHasher> hashing;  // none once settled, or for a small body

  ReceivedBody& settled() {
    if (hashing) {
      digests = hashing->finish();
      hashing.reset();
    }
    return *this;
  }
};

struct RequestBody {
  using value_type = ReceivedRequestBody;

  static std::uint64_t size(const value_type& body) { return body.bytes.size(); }

  // Parsing: a declared length is mapped at once; chunks are appended as they come, and
  // the multipart parts hashed as far as they have come after each.
  class reader {
   public:
    // The parser makes its reader before the header has come; init() reads it.
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>& header, value_type& body)
        : body_(body), content_type_([&header] {
            auto value = header[boost::beast::http::field::content_type];
            return std::string_view(value.data(), value.size());
          }) {}

    void init(const boost::optional<std::uint64_t>& content_length, boost::beast::error_code& ec);
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      std::size_t put = 0;
      for (auto it = boost::asio::buffer_sequence_begin(buffers); it != boost::asio::buffer_sequence_end(buffers);
           ++it) {
        boost::asio::const_buffer buffer = *it;
        if (!body_.bytes.append({static_cast<const char*>(buffer.data()), buffer.size()})) {
          ec = boost::beast::error_code(ENOMEM, boost::beast::generic_category());
          return put;
        }
        put += buffer.size();
      }
      hashed_so_far();
      ec = {};
      return put;
    }
    void finish(boost::beast::error_code& ec);

   private:
    void hashed_so_far();

    value_type& body_;
    std::function<std::string_view()> content_type_;
    std::unique_ptr<PartHasher> hasher_;  // for a large declared length; else none
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
      return std::pair{const_buffers_type(body_.bytes.data(), body_.bytes.size()), false};
    }

   private:
    const value_type& body_;
  };
};

}  // namespace kcoral
