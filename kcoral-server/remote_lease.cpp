// RemoteLease: the request/grant exchange with the front.
#include "remote_lease.hpp"

#include "worker_protocol.hpp"

namespace kcoral {

Status RemoteLease::acquire() {
  if (held_) return {};
  if (auto sent = channel_.send(R"({"type":")" + message_type_ + R"(","acquire":true})"); !sent) return sent;
  while (true) {
    auto message = channel_.receive();  // a blocking socket: waits for the grant
    if (!message) return fail(ErrorKind::engine, "lost the server while waiting for the GPU lease");
    if (*message && message_type((*message)->json) == "lease_granted") break;
  }
  held_ = true;
  return {};
}

void RemoteLease::release() {
  if (!held_) return;
  held_ = false;
  (void)channel_.send(R"({"type":")" + message_type_ + R"(","acquire":false})");
}

}  // namespace kcoral
