// Channel: framed messages with attached file descriptors over a Unix SOCK_SEQPACKET
// socket, between the server's front, its zygote and its worker processes.
//
// A frame is a text plus up to kMaxFds descriptors; what the text says is the business of
// messages.hpp. Texts longer than fit in one datagram travel in a memfd that is sent as
// the first descriptor, so a large program or result costs no pipe copies. The receiver
// trusts nothing of the sender: a spilled text must be a regular file no longer than the
// receiver's limit (checked by fstat before a byte is read), and a truncated frame is an
// error. Receiving is non-blocking-friendly: `receive` returns nullopt on EAGAIN. Not
// thread-safe; one reader and one writer.
//
//   kcoral::Channel channel(std::move(fd), /*max_text_bytes=*/1 << 20);
//   channel.send(R"({"type":"progress","index":3})");
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

struct Frame {
  std::string json;
  std::vector<UniqueFd> fds;
  // A text that came in a memfd, left there by receive_unread until read_spilled reads it.
  UniqueFd spilled;
  std::size_t spilled_bytes = 0;  // its size when it came

  // The text's size, read or not.
  [[nodiscard]] std::size_t text_bytes() const { return spilled ? spilled_bytes : json.size(); }
};

class Channel {
 public:
  static constexpr std::size_t kMaxFds = 250;

  static constexpr std::size_t kDefaultMaxTextBytes = std::size_t{1} << 30;
  static constexpr std::chrono::milliseconds kDefaultSendWait{30000};

  Channel() = default;
  // `max_text_bytes` bounds what `receive` accepts (a longer text is an error); `send_wait`,
  // how long a send waits for room in a non-blocking socket whose peer reads too little.
  explicit Channel(UniqueFd socket, std::size_t max_text_bytes = kDefaultMaxTextBytes,
                   std::chrono::milliseconds send_wait = kDefaultSendWait)
      : socket_(std::move(socket)), max_text_bytes_(max_text_bytes), send_wait_(send_wait) {}

  // A connected SOCK_SEQPACKET pair, close-on-exec.
  [[nodiscard]] static Result<std::pair<UniqueFd, UniqueFd>> socket_pair();

  // Sends one message; its descriptors are duplicated into the receiver and stay ours.
  [[nodiscard]] Status send(std::string_view json, const std::vector<int>& fds = {}) const;
  // Receives one frame. nullopt: nothing to read (non-blocking socket); an error when the
  // peer is gone (peer_closed() then says so) or when the frame breaks the rules above
  // (its descriptors are closed then).
  [[nodiscard]] Result<std::optional<Frame>> receive() const;
  // The same, but a text that came in a memfd is left there (checked to be a regular file
  // within the limit), for read_spilled to read, on another thread if it is large.
  [[nodiscard]] Result<std::optional<Frame>> receive_unread() const;
  // Reads a frame's spilled text into its json (checked again: the sender may have changed
  // the file meanwhile). `max_text_bytes`: the receiving channel's.
  [[nodiscard]] static Status read_spilled(Frame& frame, std::size_t max_text_bytes);
  [[nodiscard]] std::size_t max_text_bytes() const { return max_text_bytes_; }
  // Whether a send or a receive found the peer gone: what tells an exit from a violation.
  [[nodiscard]] bool peer_closed() const { return peer_closed_; }

  [[nodiscard]] int fd() const { return socket_.get(); }
  [[nodiscard]] bool valid() const { return socket_.valid(); }
  UniqueFd release_socket() { return std::move(socket_); }

 private:
  // The peer's end was found closed.
  [[nodiscard]] Error closed() const;
  [[nodiscard]] Result<std::optional<Frame>> receive_frame(bool read_spilled) const;

  UniqueFd socket_;
  std::size_t max_text_bytes_ = kDefaultMaxTextBytes;
  std::chrono::milliseconds send_wait_ = kDefaultSendWait;
  mutable bool peer_closed_ = false;  // set by the const send and receive, as errno would be
};

}  // namespace kcoral
