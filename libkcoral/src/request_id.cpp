// Request ids through Boost.UUID.
#include "kcoral/request_id.hpp"

#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/string_generator.hpp>
#include <boost/uuid/uuid_io.hpp>

namespace kcoral {

std::string new_request_id() {
  thread_local boost::uuids::random_generator generator;
  return boost::uuids::to_string(generator());
}

bool is_canonical_request_id(std::string_view text) {
  if (text.size() != 36) return false;
  try {
    return boost::uuids::to_string(boost::uuids::string_generator()(std::string(text))) == text;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace kcoral
