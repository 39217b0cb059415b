// ResponseBodyType: the Beast body type of the front's responses, whose value is a
// kcoral::ResponseBody (kcoral/codec.hpp): its text and the blobs of returned values go to
// the socket a window of buffers at a time, the blobs from their memory files, uncopied.
//
//   boost::beast::http::response<kcoral::ResponseBodyType> response;
//   response.body() = encoded.body;  // or a string
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "kcoral/codec.hpp"

namespace kcoral {

struct ResponseBodyType {
  using value_type = ResponseBody;

  static std::uint64_t size(const value_type& body) { return body.size(); }

  class writer {
   public:
    using const_buffers_type = std::vector<boost::asio::const_buffer>;

    template <bool isRequest, class Fields>
    writer(const boost::beast::http::header<isRequest, Fields>&, const value_type& body) : body_(body) {}

    void init(boost::beast::error_code& ec) { ec = {}; }

    // The body a window of buffers at a time: the serializer walks what it was given at
    // each write (to measure, prefix and consume it), so a body of a million small parts
    // given at once took it time quadratic in them; a window costs each write its own size.
    boost::optional<std::pair<const_buffers_type, bool>> get(boost::beast::error_code& ec) {
      ec = {};
      const std::vector<ResponseBody::Piece>& pieces = body_.pieces();
      const_buffers_type buffers;
      while (next_ < pieces.size() && buffers.size() < kBuffersAtOnce) {
        std::string_view bytes = ResponseBody::bytes_of(pieces[next_++]);
        if (!bytes.empty()) buffers.emplace_back(bytes.data(), bytes.size());
      }
      if (buffers.empty()) return boost::none;
      return std::make_pair(std::move(buffers), next_ < pieces.size());
    }

   private:
    // Four times what one writev takes (asio gives it at most 64 buffers).
    static constexpr std::size_t kBuffersAtOnce = 256;

    const value_type& body_;
    std::size_t next_ = 0;  // the first piece not given yet
  };
};

}  // namespace kcoral
