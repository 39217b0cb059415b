// RemoteLease: the request/grant exchange with the front.
#include "remote_lease.hpp"

namespace kcoral {

Status RemoteLease::ask(bool acquire) {
  if (kind_ == Kind::init) return courier_.send(messages::InitLease{acquire});
  return courier_.send(messages::Lease{acquire});
}

Status RemoteLease::acquire() {
  if (held_) return {};
  if (auto sent = ask(true); !sent) return sent;
  // Nothing else comes from the front while a program runs; a grant is the answer.
  auto answer = courier_.receive();
  if (!answer) return fail(ErrorKind::engine, "lost the server while waiting for the GPU lease");
  if (!std::holds_alternative<messages::LeaseGranted>(answer->message))
    return fail(ErrorKind::engine, "the server answered a lease request with '" +
                                       std::string(messages::name_of(answer->message)) + "'");
  held_ = true;
  return {};
}

void RemoteLease::release() {
  if (!held_) return;
  held_ = false;
  (void)ask(false);
}

}  // namespace kcoral
