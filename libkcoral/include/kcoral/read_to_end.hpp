// read_to_end: what a descriptor gives until its end (a pipe whose writers closed, a
// small /proc file), or until a read fails; a read that a signal interrupts is made again,
// so that a signal never cuts the text short (a children list that missed a child).
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <string>

namespace kcoral {

inline std::string read_to_end(int fd) {
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace kcoral
