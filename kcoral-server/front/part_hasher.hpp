// PartHasher: the multipart parts of a large request body hashed on a thread of their own
// while the body arrives.
//
// Hashed on the session's thread, as a small body is (MultipartDigests after each read),
// 64 MiB hold that thread 37 ms besides the reading and writing, and the upload takes
// their sum. Here the session only says how far the body has been written, and a thread
// hashes behind it through a read-only mapping of its own. That mapping is of a read-only
// descriptor of the memory file, so the file can be sealed while it exists; the thread
// unmaps it when it is done, so the session never waits for a 64 MiB mapping to be torn
// down. The thread shares nothing with the session but the hasher's state (its own, kept
// alive by the thread as long as it runs): abandoning a body mid-way only tells the
// thread to stop.
//
//   auto hasher = PartHasher::start(body.fd(), body.capacity(), content_type);
//   if (hasher) hasher->written(body.size());     // after each read
//   MultipartDigests digests = hasher->finish();  // the body is whole: wait, and take them
//
// Not thread-safe itself: one session feeds it, and hands it on with the body whole; the
// wait in finish() is the admission's, on a long-step thread (ReceivedRequestBody).
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "kcoral/multipart_digests.hpp"

namespace kcoral {

class PartHasher {
 public:
  // Bodies from this size on are worth a thread.
  static constexpr std::size_t kFromBytes = std::size_t{1} << 20;

  // Hashes the parts of a body of at most `length` bytes written into the memory file
  // `fd` (a multipart/form-data body of `content_type`), on a thread of its own; nullptr
  // where no read-only view of the file or no thread is to be had.
  [[nodiscard]] static std::unique_ptr<PartHasher> start(int fd, std::size_t length, std::string_view content_type);

  PartHasher(const PartHasher&) = delete;
  PartHasher& operator=(const PartHasher&) = delete;
  ~PartHasher();  // before finish(): the thread stops without hashing further

  // The body's first `size` bytes are in the file (it hashes no more than the length given
  // to start).
  void written(std::size_t size);
  // Waits until everything written has been hashed, and gives the digests.
  [[nodiscard]] MultipartDigests finish();

 private:
  struct State;
  explicit PartHasher(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace kcoral
