// UniqueFd's one non-trivial member.
#include "kcoral/unique_fd.hpp"

#include <unistd.h>

namespace kcoral {

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace kcoral
