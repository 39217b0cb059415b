// RequestBody: a declared length reserved, and the parts' hashing set up, before the bytes come.
#include "request_body.hpp"

#include <cerrno>

#include "kcoral/multipart.hpp"

namespace kcoral {

void RequestBody::reader::init(const boost::optional<std::uint64_t>& content_length, boost::beast::error_code& ec) {
  ec = {};
  body_.digests = MultipartDigests(content_type_());
  if (content_length && !body_.bytes.reserve(static_cast<std::size_t>(*content_length))) {
    ec = boost::beast::error_code(ENOMEM, boost::beast::generic_category());
    return;
  }
  if (content_length && *content_length >= PartHasher::kFromBytes && multipart_boundary(content_type_()))
    hasher_ = PartHasher::start(body_.bytes.fd(), static_cast<std::size_t>(*content_length), content_type_());
}

void RequestBody::reader::hashed_so_far() {
  // Past the declared length (the parser lets nothing through) the hasher sees nothing, so
  // it records no digest of a part that reaches there: parse_execute_request hashes it.
  if (hasher_) hasher_->written(body_.bytes.size());
  else body_.digests.advance(body_.bytes.view());
}

void RequestBody::reader::finish(boost::beast::error_code& ec) {
  ec = {};
  body_.hashing = std::move(hasher_);  // settled where the body is admitted
}

}  // namespace kcoral
