// A raw channel frame that says its text was spilled into a memory file: what a hostile
// peer can send with a file it keeps, and change after sending.
#pragma once

#include <doctest/doctest.h>

#include <sys/socket.h>

#include <cstring>

namespace kcoral::test {

// Sends on `socket` a frame whose text is in `fd`.
inline void send_spill_frame(int socket, int fd) {
  iovec io{const_cast<char*>("F"), 1};
  char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr header{};
  header.msg_iov = &io;
  header.msg_iovlen = 1;
  header.msg_control = control;
  header.msg_controllen = sizeof control;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&header);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
  REQUIRE(::sendmsg(socket, &header, 0) == 1);
}

}  // namespace kcoral::test
