// ResponseBodyType: the Beast body type of the front's responses, whose value is a
// kcoral::ResponseBody (kcoral/codec.hpp): its text and the blobs of returned values go to
// the socket as one sequence of buffers, the blobs from their memory files, uncopied.
//
//   boost::beast::http::response<kcoral::ResponseBodyType> response;
//   response.body() = encoded.body;  // or a string
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <cstdint>
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

    // All of the body at once: the serializer writes what the socket takes and asks again
    // only for what it has not written.
    boost::optional<std::pair<const_buffers_type, bool>> get(boost::beast::error_code& ec) {
      ec = {};
      if (given_) return boost::none;
      given_ = true;
      const_buffers_type buffers;
      buffers.reserve(body_.pieces().size());
      for (const ResponseBody::Piece& piece : body_.pieces()) {
        std::string_view bytes = ResponseBody::bytes_of(piece);
        if (!bytes.empty()) buffers.emplace_back(bytes.data(), bytes.size());
      }
      return std::make_pair(std::move(buffers), false);
    }

   private:
    const value_type& body_;
    bool given_ = false;
  };
};

}  // namespace kcoral
