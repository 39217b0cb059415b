// RequestBody: a declared length reserved, and the parts' hashing set up, before the bytes come.
#include "request_body.hpp"

#include <cerrno>

namespace kcoral {

void RequestBody::reader::init(const boost::optional<std::uint64_t>& content_length, boost::beast::error_code& ec) {
  ec = {};
  body_.digests = MultipartDigests(content_type_());
  if (content_length && !body_.bytes.reserve(static_cast<std::size_t>(*content_length)))
    ec = boost::beast::error_code(ENOMEM, boost::beast::generic_category());
}

}  // namespace kcoral
