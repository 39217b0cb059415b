// read_to_end: what a descriptor gives until its end (a pipe whose writers closed, a
// small /proc file), or until a read fails.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <string>

namespace kcoral {

inline std::string read_to_end(int fd) {
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  return text;
}

}  // namespace kcoral
