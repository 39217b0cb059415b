// Channel over SOCK_SEQPACKET with SCM_RIGHTS; long texts spill into a memfd.
#include "channel.hpp"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace kcoral {
namespace {

constexpr std::size_t kInlineBytes = 48 * 1024;  // below the default socket buffer
constexpr char kInline = 'I';
constexpr char kSpilled = 'F';

Result<UniqueFd> spill(std::string_view text) {
  UniqueFd fd(::memfd_create("kcoral-message", MFD_CLOEXEC));
  if (!fd) return system_error("memfd_create");
  while (!text.empty()) {
    ssize_t n = ::write(fd.get(), text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return system_error("writing a message");
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return fd;
}

// A spilled text's size; the sender's memfd is not trusted to be a file, nor to stay its size.
Result<std::size_t> spilled_size(int fd, std::size_t max_bytes) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return system_error("fstat on a message");
  if (!S_ISREG(info.st_mode)) return fail(ErrorKind::engine, "a spilled message is not in a regular file");
  if (static_cast<std::uint64_t>(info.st_size) > max_bytes)
    return fail(ErrorKind::engine, "a message of " + std::to_string(info.st_size) + " bytes exceeds the limit of " +
                                       std::to_string(max_bytes));
  return static_cast<std::size_t>(info.st_size);
}

// Reads a spilled text, as large as it is now.
Result<std::string> unspill(int fd, std::size_t max_bytes) {
  auto size = spilled_size(fd, max_bytes);
  if (!size) return std::unexpected(size.error());
  std::string text(*size, '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return system_error("reading a message");
    done += static_cast<std::size_t>(n);
  }
  return text;
}

}  // namespace

Result<std::pair<UniqueFd, UniqueFd>> Channel::socket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) return system_error("socketpair");
  return std::pair{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Status Channel::send(std::string_view json, const std::vector<int>& fds) const {
  if (fds.size() + 1 > kMaxFds) return fail(ErrorKind::engine, "too many descriptors in one message");
  std::string frame(1, kInline);
  std::vector<int> all;
  UniqueFd spilled;
  if (json.size() > kInlineBytes) {
    auto memfd = spill(json);
    if (!memfd) return std::unexpected(memfd.error());
    spilled = std::move(*memfd);
    frame[0] = kSpilled;
    all.push_back(spilled.get());
  } else {
    frame.append(json);
  }
  all.insert(all.end(), fds.begin(), fds.end());

  iovec io{frame.data(), frame.size()};
  msghdr header{};
  header.msg_iov = &io;
  header.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * all.size()));
  if (!all.empty()) {
    header.msg_control = control.data();
    header.msg_controllen = control.size();
    cmsghdr* cmsg = CMSG_FIRSTHDR(&header);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * all.size());
    std::memcpy(CMSG_DATA(cmsg), all.data(), sizeof(int) * all.size());
  }
  int waited_ms = 0;
  while (true) {
    if (::sendmsg(socket_.get(), &header, MSG_NOSIGNAL) >= 0) return {};
    if (errno == EINTR) continue;
    // A non-blocking socket whose buffer is full (many blobs at once): the peer reads
    // eagerly, so wait for room, but not for ever.
    if ((errno == EAGAIN || errno == EWOULDBLOCK) && waited_ms < send_wait_.count()) {
      pollfd writable{socket_.get(), POLLOUT, 0};
      ::poll(&writable, 1, 100);
      waited_ms += 100;
      continue;
    }
    if (errno == EPIPE || errno == ECONNRESET) return std::unexpected(closed());
    return system_error("sendmsg");
  }
}

Result<std::optional<Frame>> Channel::receive() const { return receive_frame(/*read_spilled=*/true); }

Result<std::optional<Frame>> Channel::receive_unread() const { return receive_frame(/*read_spilled=*/false); }

Status Channel::read_spilled(Frame& frame, std::size_t max_text_bytes) {
  if (!frame.spilled) return {};
  auto text = unspill(frame.spilled.get(), max_text_bytes);
  if (!text) return std::unexpected(text.error());
  frame.json = std::move(*text);
  frame.spilled.reset();
  frame.spilled_bytes = 0;
  return {};
}

Result<std::optional<Frame>> Channel::receive_frame(bool read_spilled) const {
  std::string bytes(kInlineBytes + 1, '\0');
  std::vector<char> control(CMSG_SPACE(sizeof(int) * (kMaxFds + 1)));
  iovec io{bytes.data(), bytes.size()};
  msghdr header{};
  header.msg_iov = &io;
  header.msg_iovlen = 1;
  header.msg_control = control.data();
  header.msg_controllen = control.size();
  ssize_t n;
  do {
    n = ::recvmsg(socket_.get(), &header, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::optional<Frame>();
  if (n < 0 && errno == ECONNRESET) return std::unexpected(closed());
  if (n < 0) return system_error("recvmsg");
  if (n == 0) return std::unexpected(closed());

  Frame frame;
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&header); cmsg != nullptr; cmsg = CMSG_NXTHDR(&header, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    std::size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof fd);
      frame.fds.emplace_back(fd);
    }
  }
  if (header.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
    return fail(ErrorKind::engine, "a channel message was truncated");
  bytes.resize(static_cast<std::size_t>(n));
  if (bytes[0] != kSpilled && bytes[0] != kInline) return fail(ErrorKind::engine, "a channel frame has no kind");
  if (bytes[0] == kSpilled) {
    if (frame.fds.empty()) return fail(ErrorKind::engine, "a spilled message came without its memfd");
    auto size = spilled_size(frame.fds.front().get(), max_text_bytes_);
    if (!size) return std::unexpected(size.error());
    frame.spilled = std::move(frame.fds.front());
    frame.spilled_bytes = *size;
    frame.fds.erase(frame.fds.begin());
    if (read_spilled)
      if (auto read = Channel::read_spilled(frame, max_text_bytes_); !read) return std::unexpected(read.error());
  } else {
    if (bytes.size() - 1 > max_text_bytes_) return fail(ErrorKind::engine, "a message exceeds the limit");
    frame.json = bytes.substr(1);
  }
  return std::optional<Frame>(std::move(frame));
}

Error Channel::closed() const {
  peer_closed_ = true;
  return {ErrorKind::engine, "the other end closed the channel"};
}

}  // namespace kcoral
