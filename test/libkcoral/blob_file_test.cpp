// BlobFile (libkcoral/src/blob_file.cpp): bytes written into a memfd that grows in place,
// then kept as Blobs: slices of the same file, sealed, with every byte outside them zeroed.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "kcoral/blob_file.hpp"

namespace {

using Range = kcoral::BlobFile::Range;

// The whole memfd behind a kept blob, as another process that maps it would read it.
std::string whole_file(const kcoral::Blob& blob) {
  auto again = kcoral::Blob::from_fd(kcoral::UniqueFd(::dup(blob.fd())));
  REQUIRE_MESSAGE(again.has_value(), again.error().message);
  return std::string(again->view());
}

}  // namespace

TEST_SUITE("blob_file") {

TEST_CASE("bytes appended in many steps come back whole, growing by doubling") {
  kcoral::BlobFile bytes;
  CHECK(bytes.view().empty());
  std::string expected;
  for (int i = 0; i < 20000; ++i) {
    std::string step = std::to_string(i) + std::string(static_cast<std::size_t>(i % 97), 'a' + i % 26);
    REQUIRE(bytes.append(step));
    expected += step;
  }
  CHECK(bytes.view() == expected);
  CHECK(bytes.capacity() >= bytes.size());
  CHECK(bytes.capacity() < 4 * bytes.size());
  kcoral::BlobFile moved = std::move(bytes);
  CHECK(moved.view() == expected);
  CHECK(bytes.size() == 0);  // NOLINT: moved-from is empty, by contract
  moved = std::string_view("replaced");
  CHECK(moved.view() == "replaced");
}

TEST_CASE("a reservation is exact to the page, and an impossible one fails without harm") {
  kcoral::BlobFile bytes;
  REQUIRE(bytes.reserve(10000));
  CHECK(bytes.capacity() == 12288);
  REQUIRE(bytes.append("kept"));
  CHECK_FALSE(bytes.reserve(std::size_t{1} << 62));
  CHECK(bytes.view() == "kept");
  REQUIRE(bytes.append(std::string(20000, 'x')));  // it still grows afterwards
  CHECK(bytes.view().substr(0, 5) == "keptx");
}

TEST_CASE("keep: each range becomes a blob, slices of one sealed file, and everything else is zeros") {
  // A body as a request brings it: framing and program text around two blobs, one of them
  // large enough to span pages.
  const std::string first = "FIRST BLOB", second(3 * 4096 + 17, 'S');
  const std::string head = "--boundary\r\nprogram text with a secret\r\n--boundary\r\n";
  const std::string middle = "\r\n--boundary\r\nmore framing\r\n\r\n";
  const std::string tail = "\r\n--boundary--\r\ntrailing";
  kcoral::BlobFile body;
  REQUIRE(body.append(head + first + middle + second + tail));
  std::vector<Range> ranges{{head.size(), first.size()}, {head.size() + first.size() + middle.size(), second.size()}};

  auto blobs = body.keep(ranges);
  REQUIRE_MESSAGE(blobs.has_value(), blobs.error().message);
  CHECK(body.size() == 0);  // the body is given up
  CHECK(body.view().empty());
  REQUIRE(blobs->size() == 2);
  CHECK((*blobs)[0].view() == first);
  CHECK((*blobs)[1].view() == second);
  CHECK((*blobs)[0].fd() == (*blobs)[1].fd());
  CHECK((*blobs)[0].file_parts() == 2);
  CHECK((*blobs)[0].offset() == head.size());

  // What a worker given the descriptor can read: the blobs, zeros around them, nothing
  // after the last one.
  std::string file = whole_file((*blobs)[0]);
  CHECK(file.size() == ranges[1].offset + second.size());
  CHECK(file == std::string(head.size(), '\0') + first + std::string(middle.size(), '\0') + second);
  CHECK(file.find("secret") == std::string::npos);

  // Sealed: no write, no growth, no writable mapping.
  CHECK(::write((*blobs)[0].fd(), "x", 1) == -1);
  CHECK(::ftruncate((*blobs)[0].fd(), 1 << 20) == -1);
  CHECK(::mmap(nullptr, 4096, PROT_WRITE, MAP_SHARED, (*blobs)[0].fd(), 0) == MAP_FAILED);
}

TEST_CASE("keep: gaps of whole pages are freed, and the pieces of pages at their ends zeroed") {
  // Before the first blob, two whole pages and a piece; between the blobs, a gap across a
  // page boundary holding no whole page (6000 bytes from offset 4090 of a page).
  const std::size_t page = 4096;
  const std::string head = std::string(2 * page + 100, 's');
  const std::string first(page - 6, 'F');
  const std::string middle(6000, 'm');
  const std::string second(page, 'S');
  kcoral::BlobFile body;
  REQUIRE(body.append(head + first + middle + second + "tail"));
  std::vector<Range> ranges{{head.size(), first.size()}, {head.size() + first.size() + middle.size(), second.size()}};
  auto blobs = body.keep(ranges);
  REQUIRE_MESSAGE(blobs.has_value(), blobs.error().message);
  // The head's two whole pages hold no memory: the file's data starts after them. (Asked
  // first: reading a hole through a shared mapping gives it a page.)
  CHECK(::lseek((*blobs)[0].fd(), 0, SEEK_DATA) == static_cast<off_t>(2 * page));
  CHECK((*blobs)[0].view() == first);
  CHECK((*blobs)[1].view() == second);
  std::string file = whole_file((*blobs)[0]);
  CHECK(file == std::string(head.size(), '\0') + first + std::string(middle.size(), '\0') + second);
}

TEST_CASE("keep: empty ranges and a blob at the very start are kept as they are") {
  kcoral::BlobFile body;
  REQUIRE(body.append("abcdef"));
  auto blobs = body.keep(std::vector<Range>{{0, 3}, {3, 0}, {3, 3}});
  REQUIRE(blobs.has_value());
  REQUIRE(blobs->size() == 3);
  CHECK((*blobs)[0].view() == "abc");
  CHECK((*blobs)[1].view().empty());
  CHECK((*blobs)[2].view() == "def");
  CHECK(whole_file((*blobs)[0]) == "abcdef");
}

TEST_CASE("keep: no ranges gives no blobs; ranges out of order or outside the bytes are refused") {
  kcoral::BlobFile none;
  REQUIRE(none.append("nothing kept"));
  auto kept = none.keep({});
  REQUIRE(kept.has_value());
  CHECK(kept->empty());
  CHECK(none.size() == 0);

  for (std::vector<Range> bad : {std::vector<Range>{{4, 2}, {0, 2}}, std::vector<Range>{{0, 4}, {2, 2}},
                                 std::vector<Range>{{10, 3}}, std::vector<Range>{{2, ~std::size_t{0}}}}) {
    kcoral::BlobFile body;
    REQUIRE(body.append("0123456789ab"));
    auto refused = body.keep(bad);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().kind == kcoral::ErrorKind::engine);
    CHECK(body.size() == 0);
  }
}

TEST_CASE("a small body is held in memory, with no memfd, until it grows past 64 KiB, keeping its bytes") {
  kcoral::BlobFile body;
  std::string expected;
  while (expected.size() < (std::size_t{64} << 10)) {
    std::string step = std::to_string(expected.size()) + "|";
    REQUIRE(body.append(step));
    expected += step;
    if (expected.size() <= (std::size_t{64} << 10)) CHECK(body.fd() == -1);
  }
  REQUIRE(body.append(std::string(5000, 'z')));
  expected += std::string(5000, 'z');
  CHECK(body.fd() >= 0);
  CHECK(body.view() == expected);
  kcoral::BlobFile declared;  // a declared length past it: the file at once
  REQUIRE(declared.reserve((std::size_t{64} << 10) + 1));
  CHECK(declared.fd() >= 0);
}

TEST_CASE("keep of a body past 64 KiB, in its memfd: the same blobs, zeros and freed pages around them") {
  const std::size_t page = 4096;
  const std::string head(20 * page + 100, 'h'), blob(3 * page, 'B'), tail(50 * page, 't');
  kcoral::BlobFile body;
  REQUIRE(body.append(head + blob + tail));
  REQUIRE(body.fd() >= 0);
  auto blobs = body.keep(std::vector<Range>{{head.size(), blob.size()}});
  REQUIRE_MESSAGE(blobs.has_value(), blobs.error().message);
  REQUIRE(blobs->size() == 1);
  CHECK(::lseek((*blobs)[0].fd(), 0, SEEK_DATA) == static_cast<off_t>(20 * page));
  CHECK((*blobs)[0].view() == blob);
  CHECK(whole_file((*blobs)[0]) == std::string(head.size(), '\0') + blob);
}

TEST_CASE("keep of a body in its memfd: the blobs read through the body's own mapping, the file sealed") {
  // Sealed against writes from then on (F_SEAL_FUTURE_WRITE: adding F_SEAL_WRITE to a
  // mapped file waits for the kernel), as a worker given the descriptor must find it:
  // no write, no hole punched, no size change, no writable mapping, none made writable.
  // Bytes before the first blob within the first page (a request's program and part
  // headers) are zeroed, not punched: punched, the kernel takes the whole file out of every
  // mapping of it.
  const std::string head(100, 'h'), blob(70 << 10, 'B');
  kcoral::BlobFile body;
  REQUIRE(body.append(head + blob + "tail"));
  REQUIRE(body.fd() >= 0);
  const char* mapped = body.view().data();
  auto blobs = body.keep(std::vector<Range>{{head.size(), blob.size()}});
  REQUIRE_MESSAGE(blobs.has_value(), blobs.error().message);
  CHECK((*blobs)[0].view().data() == mapped + head.size());  // not mapped again
  CHECK((*blobs)[0].view() == blob);
  CHECK(whole_file((*blobs)[0]) == std::string(head.size(), '\0') + blob);
  int fd = (*blobs)[0].fd();
  const int seals = F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  CHECK((::fcntl(fd, F_GET_SEALS) & seals) == seals);
  CHECK(::pwrite(fd, "x", 1, static_cast<off_t>(head.size())) == -1);
  CHECK(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == -1);
  CHECK(::ftruncate(fd, 0) == -1);
  CHECK(::ftruncate(fd, static_cast<off_t>(4 * blob.size())) == -1);
  CHECK(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
  void* readable = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(readable != MAP_FAILED);
  CHECK(::mprotect(readable, 4096, PROT_READ | PROT_WRITE) == -1);
  ::munmap(readable, 4096);
  CHECK(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == -1);  // F_SEAL_SEAL: no seal changes either
  CHECK((*blobs)[0].view() == blob);
}

TEST_CASE("keep of a body never written (no file made yet) gives empty blobs for empty ranges") {
  kcoral::BlobFile body;
  auto blobs = body.keep(std::vector<Range>{{0, 0}, {0, 0}});
  REQUIRE_MESSAGE(blobs.has_value(), blobs.error().message);
  REQUIRE(blobs->size() == 2);
  CHECK((*blobs)[0].view().empty());
  CHECK((*blobs)[1].view().empty());
}

}  // TEST_SUITE
