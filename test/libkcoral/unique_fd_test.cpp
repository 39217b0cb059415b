// UniqueFd (libkcoral/src/unique_fd.cpp): one owner per descriptor; it closes on
// destruction and reset, hands ownership over on move and gives it up on release.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include "kcoral/unique_fd.hpp"

namespace {

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

int new_descriptor() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

}  // namespace

TEST_SUITE("unique_fd") {

TEST_CASE("a UniqueFd closes its descriptor when destroyed") {
  int raw = new_descriptor();
  REQUIRE(raw >= 0);
  {
    kcoral::UniqueFd fd(raw);
    CHECK(fd.valid());
    CHECK(static_cast<bool>(fd));
    CHECK(fd.get() == raw);
    CHECK(is_open(raw));
  }
  CHECK_FALSE(is_open(raw));
}

TEST_CASE("an empty UniqueFd is invalid and closes nothing") {
  kcoral::UniqueFd fd;
  CHECK_FALSE(fd.valid());
  CHECK(fd.get() == -1);
  kcoral::UniqueFd negative(-1);
  CHECK_FALSE(negative);
}

TEST_CASE("moving hands the descriptor over and leaves the source empty") {
  int raw = new_descriptor();
  kcoral::UniqueFd a(raw);
  kcoral::UniqueFd b(std::move(a));
  CHECK_FALSE(a.valid());
  CHECK(b.get() == raw);
  kcoral::UniqueFd c;
  c = std::move(b);
  CHECK(c.get() == raw);
  CHECK(is_open(raw));
  int other = new_descriptor();
  kcoral::UniqueFd d(other);
  d = std::move(c);  // closes `other`
  CHECK_FALSE(is_open(other));
  CHECK(d.get() == raw);
  auto& same = d;
  d = std::move(same);  // self-move keeps the descriptor
  CHECK(d.get() == raw);
  CHECK(is_open(raw));
}

TEST_CASE("release gives the descriptor up without closing it") {
  int raw = new_descriptor();
  int released;
  {
    kcoral::UniqueFd fd(raw);
    released = fd.release();
    CHECK_FALSE(fd.valid());
  }
  CHECK(released == raw);
  CHECK(is_open(raw));
  ::close(raw);
}

TEST_CASE("reset closes the old descriptor and takes the new one") {
  int first = new_descriptor();
  int second = new_descriptor();
  kcoral::UniqueFd fd(first);
  fd.reset(second);
  CHECK_FALSE(is_open(first));
  CHECK(fd.get() == second);
  fd.reset();
  CHECK_FALSE(is_open(second));
  CHECK_FALSE(fd.valid());
}

}  // TEST_SUITE
