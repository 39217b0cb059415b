// Channel: framed messages with attached file descriptors over a Unix SOCK_SEQPACKET
// socket, between the server's front, its zygote and its worker processes.
//
// A message is a JSON text plus up to kMaxFds descriptors (blobs, result parts). Texts
// longer than fit in one datagram travel in a memfd that is sent as the first descriptor,
// so a large program or result costs no pipe copies. Receiving is non-blocking-friendly:
// `receive` returns nullopt on EAGAIN. Not thread-safe; one reader and one writer.
//
//   kcoral::Channel channel(std::move(fd));
//   channel.send({R"({"type":"progress","index":3})", {}});
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

struct Message {
  std::string json;
  std::vector<UniqueFd> fds;
};

class Channel {
 public:
  static constexpr std::size_t kMaxFds = 250;

  Channel() = default;
  explicit Channel(UniqueFd socket) : socket_(std::move(socket)) {}

  // A connected SOCK_SEQPACKET pair, close-on-exec.
  [[nodiscard]] static Result<std::pair<UniqueFd, UniqueFd>> socket_pair();

  // Sends one message; its descriptors are duplicated into the receiver and stay ours.
  [[nodiscard]] Status send(std::string_view json, const std::vector<int>& fds = {}) const;
  // Receives one message. nullopt: nothing to read (non-blocking socket) ; an error with
  // kind `engine` and message "closed" when the peer is gone.
  [[nodiscard]] Result<std::optional<Message>> receive() const;

  [[nodiscard]] int fd() const { return socket_.get(); }
  [[nodiscard]] bool valid() const { return socket_.valid(); }
  UniqueFd release_socket() { return std::move(socket_); }

 private:
  UniqueFd socket_;
};

// Whether a receive error means the peer closed the channel.
[[nodiscard]] bool is_closed(const Error& error);

}  // namespace kcoral
