// Channel (kcoral-server/channel.cpp): framed JSON messages with descriptors over a
// SOCK_SEQPACKET pair. Message boundaries, descriptors duplicated into the receiver,
// texts over 48 KiB spilled into a memfd (and the exact boundary), the descriptor limit,
// non-blocking receive, and a closed peer seen by both receive and send. A spilled text
// left unread (receive_unread) is read later by read_spilled, which checks it again.
#include <doctest/doctest.h>

#include <cstdint>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "channel.hpp"
#include "kcoral-server/channel/spill_frame.hpp"

using kcoral::Channel;
using kcoral::UniqueFd;
using kcoral::test::send_spill_frame;

namespace {

struct Pair {
  Channel a;
  Channel b;
};

Pair connected() {
  auto fds = Channel::socket_pair();
  REQUIRE_MESSAGE(fds.has_value(), fds.error().message);
  return {Channel(std::move(fds->first)), Channel(std::move(fds->second))};
}

kcoral::Frame receive(const Channel& channel) {
  auto message = channel.receive();
  REQUIRE_MESSAGE(message.has_value(), message.error().message);
  REQUIRE(message->has_value());
  return std::move(**message);
}

UniqueFd memfd_with(std::string_view text) {
  UniqueFd fd(::memfd_create("channel-test", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  REQUIRE(::write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  return fd;
}

std::string contents(int fd) {
  std::string out(4096, '\0');
  ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return out;
}

}  // namespace

TEST_SUITE("channel") {

TEST_CASE("socket_pair makes two connected close-on-exec sequenced-packet sockets") {
  auto pair = connected();
  CHECK(pair.a.valid());
  CHECK(pair.b.valid());
  CHECK((::fcntl(pair.a.fd(), F_GETFD) & FD_CLOEXEC) != 0);
  int type = 0;
  socklen_t size = sizeof type;
  REQUIRE(::getsockopt(pair.a.fd(), SOL_SOCKET, SO_TYPE, &type, &size) == 0);
  CHECK(type == SOCK_SEQPACKET);
}

TEST_CASE("messages arrive whole, in order, each on its own") {
  auto pair = connected();
  REQUIRE(pair.a.send(R"({"type":"progress","index":3})").has_value());
  REQUIRE(pair.a.send("").has_value());
  REQUIRE(pair.a.send(R"({"type":"x"})").has_value());
  CHECK(receive(pair.b).json == R"({"type":"progress","index":3})");
  CHECK(receive(pair.b).json.empty());
  CHECK(receive(pair.b).json == R"({"type":"x"})");
  // Both directions work.
  REQUIRE(pair.b.send("back").has_value());
  CHECK(receive(pair.a).json == "back");
}

TEST_CASE("a non-blocking receive with nothing to read returns no message") {
  auto pair = connected();
  ::fcntl(pair.b.fd(), F_SETFL, O_NONBLOCK);
  auto message = pair.b.receive();
  REQUIRE(message.has_value());
  CHECK_FALSE(message->has_value());
}

TEST_CASE("descriptors are duplicated into the receiver and stay the sender's") {
  auto pair = connected();
  UniqueFd first = memfd_with("first");
  UniqueFd second = memfd_with("second");
  REQUIRE(pair.a.send("{}", {first.get(), second.get()}).has_value());
  kcoral::Frame message = receive(pair.b);
  REQUIRE(message.fds.size() == 2);
  CHECK(contents(message.fds[0].get()) == "first");
  CHECK(contents(message.fds[1].get()) == "second");
  CHECK(message.fds[0].get() != first.get());
  CHECK((::fcntl(message.fds[0].get(), F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(::fcntl(first.get(), F_GETFD) != -1);  // still open on the sending side
}

TEST_CASE("a text of exactly 48 KiB goes inline and one byte more is spilled, both intact") {
  auto pair = connected();
  for (std::size_t size : {std::size_t{48 * 1024}, std::size_t{48 * 1024 + 1}, std::size_t{5 << 20}}) {
    CAPTURE(size);
    std::string text(size, 'j');
    text.front() = '[';
    text.back() = ']';
    UniqueFd attached = memfd_with("attached");
    REQUIRE(pair.a.send(text, {attached.get()}).has_value());
    kcoral::Frame message = receive(pair.b);
    CHECK(message.json.size() == size);
    CHECK(message.json == text);
    // The spill memfd is not among the message's descriptors.
    REQUIRE(message.fds.size() == 1);
    CHECK(contents(message.fds[0].get()) == "attached");
  }
}

TEST_CASE("up to kMaxFds - 1 descriptors fit one message, spilled or not") {
  auto pair = connected();
  UniqueFd fd = memfd_with("x");
  std::vector<int> fds(Channel::kMaxFds - 1, fd.get());
  REQUIRE(pair.a.send("{}", fds).has_value());
  CHECK(receive(pair.b).fds.size() == Channel::kMaxFds - 1);
  REQUIRE(pair.a.send(std::string(100000, ' '), fds).has_value());
  kcoral::Frame spilled = receive(pair.b);
  CHECK(spilled.fds.size() == Channel::kMaxFds - 1);
  CHECK(spilled.json.size() == 100000);
  fds.push_back(fd.get());
  auto too_many = pair.a.send("{}", fds);
  REQUIRE_FALSE(too_many.has_value());
  CHECK(too_many.error().kind == kcoral::ErrorKind::engine);
}

TEST_CASE("a closed peer is reported as closed by receive and by send") {
  auto pair = connected();
  REQUIRE(pair.a.send("last words").has_value());
  (void)pair.a.release_socket();  // closes a's end (the UniqueFd goes out of scope)
  CHECK_FALSE(pair.a.valid());
  CHECK(receive(pair.b).json == "last words");  // what was sent before still arrives
  CHECK_FALSE(pair.b.peer_closed());
  auto after = pair.b.receive();
  REQUIRE_FALSE(after.has_value());
  CHECK(pair.b.peer_closed());
  auto sent = pair.b.send("anyone?");
  REQUIRE_FALSE(sent.has_value());
  CHECK(pair.b.peer_closed());
}

TEST_CASE("a send to a peer that reads nothing gives up after the channel's wait") {
  auto fds = Channel::socket_pair();
  REQUIRE(fds.has_value());
  Channel sender(std::move(fds->first), Channel::kDefaultMaxTextBytes, std::chrono::milliseconds(200));
  Channel reader(std::move(fds->second));  // never read
  ::fcntl(sender.fd(), F_SETFL, O_NONBLOCK);
  const std::string frame(48 * 1024, 'x');
  auto start = std::chrono::steady_clock::now();
  kcoral::Status sent;
  for (int i = 0; i < 10000 && sent; ++i) sent = sender.send(frame);
  CHECK_FALSE(sent.has_value());
  CHECK_FALSE(sender.peer_closed());
  auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= std::chrono::milliseconds(200));
  CHECK(waited < std::chrono::seconds(10));  // not the default 30 s
}

TEST_CASE("a send to a peer that closed its end says the peer closed") {
  auto pair = connected();
  (void)pair.b.release_socket();
  auto sent = pair.a.send("nobody");
  REQUIRE_FALSE(sent.has_value());
  CHECK(pair.a.peer_closed());
}

TEST_CASE("a receiver refuses a spilled text over its limit, before reading it") {
  auto fds = Channel::socket_pair();
  REQUIRE(fds.has_value());
  Channel sender(std::move(fds->first)), receiver(std::move(fds->second), 1000);
  REQUIRE(sender.send(std::string(1001, 'x')).has_value());  // inline, over the limit
  CHECK(!receiver.receive().has_value());
  // A spill of 64 GiB (a sparse memfd): refused by its size, nothing allocated.
  UniqueFd huge(::memfd_create("huge", MFD_CLOEXEC));
  REQUIRE(::ftruncate(huge.get(), std::int64_t{64} << 30) == 0);
  send_spill_frame(sender.fd(), huge.get());
  auto refused = receiver.receive();
  REQUIRE(!refused.has_value());
  CHECK(refused.error().message.find("exceeds the limit") != std::string::npos);
}

TEST_CASE("a spilled text must come in a regular file, and a frame must say its kind") {
  auto pair = connected();
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  send_spill_frame(pair.a.fd(), read_end.get());
  auto refused = pair.b.receive();
  REQUIRE(!refused.has_value());
  CHECK(refused.error().message.find("regular file") != std::string::npos);
  REQUIRE(::send(pair.a.fd(), "X{}", 3, 0) == 3);
  CHECK(!pair.b.receive().has_value());
}

TEST_CASE("a spilled text left unread is read later, and checked again then") {
  auto fds = Channel::socket_pair();
  REQUIRE(fds.has_value());
  Channel sender(std::move(fds->first)), receiver(std::move(fds->second), 100000);
  std::string text(60000, 's');
  REQUIRE(sender.send(text).has_value());
  REQUIRE(sender.send("small").has_value());
  auto unread = receiver.receive_unread();
  REQUIRE(unread.has_value());
  REQUIRE(unread->has_value());
  kcoral::Frame& frame = **unread;
  CHECK(frame.json.empty());
  CHECK(frame.spilled.valid());
  CHECK(frame.text_bytes() == text.size());
  REQUIRE(Channel::read_spilled(frame, receiver.max_text_bytes()).has_value());
  CHECK(frame.json == text);
  CHECK_FALSE(frame.spilled.valid());
  auto inline_frame = receiver.receive_unread();  // an inline text comes read
  REQUIRE(inline_frame.has_value());
  CHECK((*inline_frame)->json == "small");
  // A memfd grown past the limit after the frame came: refused when it is read.
  UniqueFd grown = memfd_with(std::string(50000, 'g'));
  send_spill_frame(sender.fd(), grown.get());
  auto later = receiver.receive_unread();
  REQUIRE(later.has_value());
  REQUIRE(::ftruncate(grown.get(), 200000) == 0);
  auto refused = Channel::read_spilled(**later, receiver.max_text_bytes());
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("exceeds the limit") != std::string::npos);
}

TEST_CASE("a frame that breaks the rules is an error, not a closed peer") {
  auto pair = connected();
  REQUIRE(::send(pair.a.fd(), "X{}", 3, 0) == 3);
  REQUIRE_FALSE(pair.b.receive().has_value());
  CHECK_FALSE(pair.b.peer_closed());
}

TEST_CASE("a default channel is invalid and fails to send and receive") {
  Channel channel;
  CHECK_FALSE(channel.valid());
  CHECK_FALSE(channel.send("{}").has_value());
  CHECK_FALSE(channel.receive().has_value());
}

}  // TEST_SUITE
