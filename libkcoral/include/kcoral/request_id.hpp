// Request ids: random (version 4) UUIDs in lowercase canonical form.
#pragma once

#include <string>
#include <string_view>

namespace kcoral {

[[nodiscard]] std::string new_request_id();
// Whether a client-sent X-Request-ID is one lowercase canonical UUID (else it is ignored).
[[nodiscard]] bool is_canonical_request_id(std::string_view text);

}  // namespace kcoral
