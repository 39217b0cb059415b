// Blob (libkcoral/src/blob.cpp): bytes copied into a sealed memfd and mapped read-only.
// The memfd cannot be written, grown or shrunk through its descriptor; copies share one
// mapping that outlives the original; from_fd maps a descriptor another process sent;
// from_untrusted_fd only a sealed regular file within a size limit; slices share their
// blob's memfd; BlobBuilder puts many parts behind one sealed memfd, and gives their
// SHA-256 digests when asked, computed beside the copy for large ones.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <span>
#include <string>
#include <vector>

#include "kcoral/blob.hpp"
#include "kcoral/sha256.hpp"

namespace {

kcoral::Blob blob_of(std::string_view data) {
  auto blob = kcoral::Blob::copy_of(data);
  REQUIRE_MESSAGE(blob.has_value(), blob.error().message);
  return *blob;
}

}  // namespace

TEST_SUITE("blob") {

TEST_CASE("a blob holds a copy of its bytes") {
  std::string data("binary\0data\xff", 12);
  kcoral::Blob blob = blob_of(data);
  data[0] = 'X';  // the blob does not see later changes of the source
  CHECK(blob.size() == 12);
  CHECK(blob.view() == std::string_view("binary\0data\xff", 12));
  CHECK(blob.bytes().size() == 12);
  CHECK(blob.fd() >= 0);
}

TEST_CASE("the byte-span overload copies the same bytes") {
  const std::byte raw[] = {std::byte{1}, std::byte{0}, std::byte{255}};
  auto blob = kcoral::Blob::copy_of(std::span<const std::byte>(raw));
  REQUIRE(blob.has_value());
  CHECK(blob->view() == std::string_view("\x01\x00\xff", 3));
}

TEST_CASE("an empty blob has no bytes but still a descriptor") {
  kcoral::Blob blob = blob_of("");
  CHECK(blob.size() == 0);
  CHECK(blob.view().empty());
  CHECK(blob.fd() >= 0);
}

TEST_CASE("a default blob is empty and has no descriptor") {
  kcoral::Blob blob;
  CHECK(blob.size() == 0);
  CHECK(blob.view().empty());
  CHECK(blob.fd() == -1);
}

TEST_CASE("the memfd is sealed: writes, truncation and growth through the descriptor fail") {
  kcoral::Blob blob = blob_of("sealed");
  int seals = ::fcntl(blob.fd(), F_GET_SEALS);
  CHECK((seals & F_SEAL_WRITE) != 0);
  CHECK((seals & F_SEAL_SHRINK) != 0);
  CHECK((seals & F_SEAL_GROW) != 0);
  CHECK((seals & F_SEAL_SEAL) != 0);
  CHECK(::pwrite(blob.fd(), "X", 1, 0) == -1);
  CHECK(::ftruncate(blob.fd(), 0) == -1);
  CHECK(::ftruncate(blob.fd(), 100) == -1);
  // A writable shared mapping is refused too.
  void* writable = ::mmap(nullptr, 6, PROT_READ | PROT_WRITE, MAP_SHARED, blob.fd(), 0);
  CHECK(writable == MAP_FAILED);
  if (writable != MAP_FAILED) ::munmap(writable, 6);
  CHECK(blob.view() == "sealed");
}

TEST_CASE("sealed_copy: the same sealed memfd, unmapped here, that a receiver of its descriptor may map") {
  std::string data("program\0text", 12);
  auto file = kcoral::Blob::sealed_copy(std::as_bytes(std::span(data)));
  REQUIRE_MESSAGE(file.has_value(), file.error().message);
  int seals = ::fcntl(file->get(), F_GET_SEALS);
  CHECK((seals & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
        (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
  CHECK((::fcntl(file->get(), F_GETFD) & FD_CLOEXEC) != 0);
  CHECK(::pwrite(file->get(), "X", 1, 0) == -1);
  // What a worker does with it: the checks for an untrusted descriptor pass, and the bytes
  // are the copy's, whatever happened to the source since.
  data[0] = 'X';
  auto received = kcoral::Blob::from_untrusted_fd(std::move(*file), 12);
  REQUIRE_MESSAGE(received.has_value(), received.error().message);
  CHECK(received->view() == std::string_view("program\0text", 12));
}

TEST_CASE("the descriptor is close-on-exec") {
  kcoral::Blob blob = blob_of("x");
  CHECK((::fcntl(blob.fd(), F_GETFD) & FD_CLOEXEC) != 0);
}

TEST_CASE("copies share one mapping that outlives the original") {
  std::optional<kcoral::Blob> original(blob_of("shared"));
  kcoral::Blob copy = *original;
  CHECK(copy.view().data() == original->view().data());
  CHECK(copy.fd() == original->fd());
  original.reset();
  CHECK(copy.view() == "shared");
  CHECK(::fcntl(copy.fd(), F_GETFD) != -1);
}

TEST_CASE("from_fd maps a received descriptor: a round trip through dup") {
  kcoral::Blob blob = blob_of(std::string(100000, 'z') + "end");
  auto received = kcoral::Blob::from_fd(kcoral::UniqueFd(::fcntl(blob.fd(), F_DUPFD_CLOEXEC, 0)));
  REQUIRE_MESSAGE(received.has_value(), received.error().message);
  CHECK(received->size() == blob.size());
  CHECK(received->view() == blob.view());
  CHECK(received->fd() != blob.fd());
}

TEST_CASE("from_fd maps an ordinary memfd and an empty one") {
  int fd = ::memfd_create("test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "plain", 5) == 5);
  auto plain = kcoral::Blob::from_fd(kcoral::UniqueFd(fd));
  REQUIRE(plain.has_value());
  CHECK(plain->view() == "plain");

  auto empty = kcoral::Blob::from_fd(kcoral::UniqueFd(::memfd_create("empty", MFD_CLOEXEC)));
  REQUIRE(empty.has_value());
  CHECK(empty->size() == 0);
}

TEST_CASE("from_fd of an invalid descriptor fails with engine") {
  auto blob = kcoral::Blob::from_fd(kcoral::UniqueFd());
  REQUIRE_FALSE(blob.has_value());
  CHECK(blob.error().kind == kcoral::ErrorKind::engine);
}

TEST_CASE("from_untrusted_fd takes a sealed memfd within the limit, and nothing else") {
  kcoral::Blob sealed = blob_of("sealed");
  auto taken = kcoral::Blob::from_untrusted_fd(kcoral::UniqueFd(::dup(sealed.fd())), 6);
  REQUIRE(taken.has_value());
  CHECK(taken->view() == "sealed");
  auto too_long = kcoral::Blob::from_untrusted_fd(kcoral::UniqueFd(::dup(sealed.fd())), 5);
  REQUIRE(!too_long.has_value());
  CHECK(too_long.error().message.find("exceeds the limit of 5") != std::string::npos);

  kcoral::UniqueFd open_memfd(::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  REQUIRE(::write(open_memfd.get(), "abc", 3) == 3);
  ::fcntl(open_memfd.get(), F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK);  // still writable
  CHECK(kcoral::Blob::from_untrusted_fd(std::move(open_memfd), 100).error().message.find("not sealed") !=
        std::string::npos);
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  ::close(pipe_fds[1]);
  CHECK(kcoral::Blob::from_untrusted_fd(kcoral::UniqueFd(pipe_fds[0]), 100).error().message.find("regular file") !=
        std::string::npos);
}

TEST_CASE("a slice shares its blob's memfd and keeps its own bounds") {
  kcoral::Blob blob = blob_of("0123456789");
  auto middle = blob.slice(3, 4);
  REQUIRE(middle.has_value());
  CHECK(middle->view() == "3456");
  CHECK(middle->fd() == blob.fd());
  CHECK(middle->offset() == 3);
  CHECK(middle->slice(1, 2)->view() == "45");
  CHECK(middle->slice(1, 2)->offset() == 4);
  CHECK(blob.slice(10, 0).has_value());
  CHECK(!blob.slice(8, 3).has_value());
  CHECK(!blob.slice(11, 0).has_value());
  CHECK(!blob.slice(1, ~std::size_t{0}).has_value());
}

TEST_CASE("copy_to reads a blob's own bytes, a slice's too, from its memfd, into a buffer of its size only") {
  std::string text(3 * 4096 + 17, '\0');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + i % 26);
  kcoral::Blob blob = blob_of(text);
  std::string out(text.size(), '\0');
  REQUIRE(blob.copy_to(std::as_writable_bytes(std::span(out))).has_value());
  CHECK(out == text);
  auto middle = blob.slice(4095, 4099);
  REQUIRE(middle.has_value());
  std::string part(middle->size(), '\0');
  REQUIRE(middle->copy_to(std::as_writable_bytes(std::span(part))).has_value());
  CHECK(part == text.substr(4095, 4099));
  std::string wrong(middle->size() + 1, '\0');
  CHECK(!middle->copy_to(std::as_writable_bytes(std::span(wrong))).has_value());
  CHECK(kcoral::Blob().copy_to({}).has_value());
}

TEST_CASE("BlobBuilder puts every part, empty ones too, behind one sealed memfd, in order") {
  kcoral::BlobBuilder builder;
  CHECK(builder.finish()->empty());
  REQUIRE(builder.append(std::string_view("first")).has_value());
  REQUIRE(builder.append(std::string_view("")).has_value());
  REQUIRE(builder.append(std::string_view("third")).has_value());
  CHECK(builder.count() == 3);
  CHECK(builder.bytes() == 10);
  auto parts = builder.finish();
  REQUIRE(parts.has_value());
  REQUIRE(parts->size() == 3);
  CHECK((*parts)[0].view() == "first");
  CHECK((*parts)[1].view().empty());
  CHECK((*parts)[2].view() == "third");
  CHECK((*parts)[2].offset() == 5);
  CHECK((*parts)[0].fd() == (*parts)[2].fd());
  CHECK(::write((*parts)[0].fd(), "x", 1) == -1);
  auto again = kcoral::Blob::from_untrusted_fd(kcoral::UniqueFd(::dup((*parts)[0].fd())), 10);
  REQUIRE(again.has_value());
  CHECK(again->view() == "firstthird");
}

TEST_CASE("BlobBuilder can start large parts on a page, so that they map on their own") {
  kcoral::BlobBuilder builder(kcoral::BlobBuilder::kMappableFrom);
  const std::string large(kcoral::BlobBuilder::kMappableFrom, 'L');
  REQUIRE(builder.append(std::string_view("small")).has_value());
  REQUIRE(builder.append(large).has_value());
  REQUIRE(builder.append(std::string_view("tail")).has_value());
  CHECK(builder.bytes() == 9 + large.size());
  auto parts = builder.finish();
  REQUIRE(parts.has_value());
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  CHECK((*parts)[0].offset() == 0);
  CHECK((*parts)[1].offset() == page);
  CHECK((*parts)[1].view() == large);
  CHECK((*parts)[2].offset() == page + large.size());  // small parts are packed
  CHECK((*parts)[2].view() == "tail");
  CHECK((*parts)[0].file_parts() == 3);
  CHECK((*parts)[0].file_size() == page + large.size() + 4);
}

TEST_CASE("BlobBuilder::append_hashed stores the pieces and gives each one's SHA-256, small or large") {
  // Below kHashAlongsideBytes in all the digests are computed inline, above it on a thread
  // beside the copy; either way each digest is the piece's own, in order.
  for (std::size_t large_size : {std::size_t{100}, kcoral::BlobBuilder::kHashAlongsideBytes + 3}) {
    CAPTURE(large_size);
    std::string large(large_size, '\0');
    for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 131 % 251);
    const std::string small = "small", empty;
    std::vector<std::span<const std::byte>> pieces{std::as_bytes(std::span(small)), std::as_bytes(std::span(empty)),
                                                   std::as_bytes(std::span(large))};
    kcoral::BlobBuilder builder;
    REQUIRE(builder.append(std::string_view("before")).has_value());
    auto digests = builder.append_hashed(pieces);
    REQUIRE(digests.has_value());
    CHECK(*digests == std::vector<std::string>{kcoral::sha256_hex(small), kcoral::sha256_hex(empty),
                                               kcoral::sha256_hex(large)});
    auto parts = builder.finish();
    REQUIRE(parts.has_value());
    REQUIRE(parts->size() == 4);
    CHECK((*parts)[1].view() == small);
    CHECK((*parts)[2].view().empty());
    CHECK((*parts)[3].view() == large);
  }
  kcoral::BlobBuilder none;
  auto digests = none.append_hashed({});
  REQUIRE(digests.has_value());
  CHECK(digests->empty());
  CHECK(none.count() == 0);
}

TEST_CASE("Blob::equals compares with the memfd's bytes, across its read steps and within a slice") {
  std::string bytes(std::size_t{600} << 10, '\0');  // more than two of its 256 KiB steps
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 % 253);
  auto whole = kcoral::Blob::copy_of("head" + bytes);
  REQUIRE(whole.has_value());
  auto blob = whole->slice(4, bytes.size());
  REQUIRE(blob.has_value());
  CHECK(blob->equals(std::as_bytes(std::span(bytes))));
  for (std::size_t at : {std::size_t{0}, std::size_t{256} << 10, bytes.size() - 1}) {
    CAPTURE(at);
    std::string other = bytes;
    other[at] = static_cast<char>(other[at] + 1);
    CHECK_FALSE(blob->equals(std::as_bytes(std::span(other))));
  }
  std::string_view shorter(bytes.data(), bytes.size() - 1);
  CHECK_FALSE(blob->equals(std::as_bytes(std::span(shorter))));
  CHECK(kcoral::Blob().equals({}));
}

TEST_CASE("a large blob is copied out and compared in stretches side by side: every byte, in a slice too") {
  // 8 MiB stretches: 41 MiB and 7 bytes is five stretches, the last one short, each on a
  // thread where the cores allow; a byte changed at any stretch's edge shows.
  const std::size_t size = (std::size_t{41} << 20) + 7;
  std::string bytes(size, '\0');
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  auto whole = kcoral::Blob::copy_of("ahead" + bytes);
  REQUIRE(whole.has_value());
  auto blob = whole->slice(5, size);
  REQUIRE(blob.has_value());
  std::string out(size, '\0');
  REQUIRE(blob->copy_to(std::as_writable_bytes(std::span(out))).has_value());
  CHECK(out == bytes);
  CHECK(blob->equals(std::as_bytes(std::span(bytes))));
  const std::size_t stretch = (size + 4) / 5;
  for (std::size_t at : {std::size_t{0}, stretch - 1, stretch, 3 * stretch, size - 1}) {
    CAPTURE(at);
    out[at] = static_cast<char>(out[at] + 1);
    CHECK_FALSE(blob->equals(std::as_bytes(std::span(out))));
    out[at] = bytes[at];
  }
}

TEST_CASE("BlobBuilder::append_hashed takes a repeated blob's digest for an equal piece only") {
  // The repeat's digest here is a label no hash gives: a piece that takes it was not hashed.
  for (std::size_t size : {std::size_t{100}, kcoral::BlobBuilder::kHashAlongsideBytes + 5}) {
    CAPTURE(size);
    std::string bytes(size, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
    std::string changed = bytes;
    changed.back() = static_cast<char>(changed.back() + 1);
    auto blob = kcoral::Blob::copy_of(bytes);
    REQUIRE(blob.has_value());
    const kcoral::BlobBuilder::Digested repeated{*blob, "label"};
    std::vector<std::span<const std::byte>> pieces{std::as_bytes(std::span(bytes)), std::as_bytes(std::span(changed)),
                                                   std::as_bytes(std::span(bytes)).first(size - 1),
                                                   std::as_bytes(std::span(bytes))};
    std::vector<const kcoral::BlobBuilder::Digested*> repeats{&repeated, &repeated, &repeated, nullptr};
    kcoral::BlobBuilder builder;
    auto digests = builder.append_hashed(pieces, repeats);
    REQUIRE(digests.has_value());
    CHECK(*digests == std::vector<std::string>{"label", kcoral::sha256_hex(changed),
                                               kcoral::sha256_hex(std::string_view(bytes).substr(0, size - 1)),
                                               kcoral::sha256_hex(bytes)});
    auto parts = builder.finish();
    REQUIRE(parts.has_value());
    REQUIRE(parts->size() == 4);
    CHECK((*parts)[0].view() == bytes);
    CHECK((*parts)[0].fd() == blob->fd());  // the blob itself, not a copy
    CHECK((*parts)[1].view() == changed);
    CHECK((*parts)[1].fd() != blob->fd());
    CHECK((*parts)[3].fd() == (*parts)[1].fd());
  }
}

TEST_CASE("BlobBuilder::append_shared puts a blob among the written parts, uncopied; drop_from forgets either") {
  auto shared = kcoral::Blob::copy_of(std::string_view("shared"));
  REQUIRE(shared.has_value());
  kcoral::BlobBuilder builder;
  REQUIRE(builder.append(std::string_view("one")).has_value());
  builder.append_shared(*shared);
  REQUIRE(builder.append(std::string_view("two")).has_value());
  builder.append_shared(*shared);
  CHECK(builder.count() == 4);
  CHECK(builder.bytes() == 18);
  builder.drop_from(2);  // "two" and the second share
  CHECK(builder.bytes() == 9);
  REQUIRE(builder.append(std::string_view("three")).has_value());
  auto parts = builder.finish();
  REQUIRE(parts.has_value());
  REQUIRE(parts->size() == 3);
  CHECK((*parts)[0].view() == "one");
  CHECK((*parts)[1].view() == "shared");
  CHECK((*parts)[1].fd() == shared->fd());
  CHECK((*parts)[2].view() == "three");
  CHECK((*parts)[2].offset() == 3);  // written back to back: the shared blob takes no room
  CHECK((*parts)[0].file_size() == 8);
  CHECK((*parts)[0].file_parts() == 2);
  kcoral::BlobBuilder only_shared;
  only_shared.append_shared(*shared);
  auto alone = only_shared.finish();
  REQUIRE(alone.has_value());
  REQUIRE(alone->size() == 1);
  CHECK((*alone)[0].fd() == shared->fd());
}

TEST_CASE("BlobBuilder::drop_from forgets the last parts, and later parts take their place") {
  kcoral::BlobBuilder builder(kcoral::BlobBuilder::kMappableFrom);
  const std::string large(kcoral::BlobBuilder::kMappableFrom, 'L');
  REQUIRE(builder.append(std::string_view("kept")).has_value());
  REQUIRE(builder.append(large).has_value());
  REQUIRE(builder.append(std::string_view("dropped too")).has_value());
  builder.drop_from(1);
  builder.drop_from(5);  // beyond the count: nothing
  CHECK(builder.count() == 1);
  CHECK(builder.bytes() == 4);
  REQUIRE(builder.append(std::string_view("after")).has_value());
  auto parts = builder.finish();
  REQUIRE(parts.has_value());
  REQUIRE(parts->size() == 2);
  CHECK((*parts)[0].view() == "kept");
  CHECK((*parts)[1].view() == "after");
  CHECK((*parts)[0].file_parts() == 2);
  // The dropped bytes are gone from the file, not only unnamed.
  auto whole = kcoral::Blob::from_untrusted_fd(kcoral::UniqueFd(::dup((*parts)[0].fd())), 1 << 20);
  REQUIRE(whole.has_value());
  CHECK(whole->view().find('L') == std::string_view::npos);
}

}  // TEST_SUITE
