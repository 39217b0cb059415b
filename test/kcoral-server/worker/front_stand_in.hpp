// The front's end of a channel, played by a worker-side test (test/kcoral-server/worker):
// the zygote's control channel, or a worker's. It records what it heard, for a failed
// check to show, and sends a built program as the front does (its blobs, then its text).
#pragma once

#include <doctest/doctest.h>

#include <poll.h>

#include <optional>
#include <string>
#include <vector>

#include "channel.hpp"
#include "kcoral/program_builder.hpp"
#include "messages.hpp"

namespace kcoral::test {

// How long anything awaited may take before a test gives up on it.
inline constexpr int kWaitMs = 30000;

struct FrontStandIn {
  Channel channel;
  std::string heard;  // every message's name in order, with a failure's reason

  // The next message, waited for at most kWaitMs; nullopt when the peer closed the channel
  // or nothing came.
  std::optional<messages::Received> next() {
    pollfd readable{channel.fd(), POLLIN, 0};
    if (::poll(&readable, 1, kWaitMs) != 1) {
      heard += "(nothing came) ";
      return std::nullopt;
    }
    auto received = messages::receive(channel);
    if (!received || !*received) {
      heard += "(closed) ";
      return std::nullopt;
    }
    const messages::Message& message = (*received)->message;
    heard += std::string(messages::name_of(message));
    if (const auto* failed = std::get_if<messages::ZygoteFailed>(&message)) heard += " (" + failed->message + ")";
    if (const auto* failed = std::get_if<messages::ForkFailed>(&message)) heard += " (" + failed->message + ")";
    if (const auto* failed = std::get_if<messages::Failed>(&message)) heard += " (" + failed->message + ")";
    heard += " ";
    return std::move(**received);
  }
  // The next message, which must be a T (with its descriptors in `fds`, when given).
  template <class T>
  std::optional<T> expect(std::vector<UniqueFd>* fds = nullptr) {
    auto received = next();
    if (!received) return std::nullopt;
    auto* message = std::get_if<T>(&received->message);
    if (message == nullptr) return std::nullopt;
    if (fds != nullptr) *fds = std::move(received->fds);
    return std::move(*message);
  }
  bool send(const messages::Message& message, std::vector<int> fds = {}) {
    return messages::send(channel, message, fds).has_value();
  }
  // A built program's blobs, then its text (`text`, when given, in place of the program's).
  bool send_job(const BuiltProgram& built, std::optional<std::string> text = std::nullopt,
                std::uint64_t max_returned_bytes = 1 << 20) {
    messages::Blobs blobs;
    std::vector<int> fds;
    for (const auto& [digest, blob] : built.blobs) {
      blobs.digests.push_back(digest);
      blobs.files.push_back(fds.size());
      blobs.offsets.push_back(blob.offset());
      blobs.sizes.push_back(blob.size());
      fds.push_back(blob.fd());
    }
    blobs.file_count = fds.size();
    if (!blobs.digests.empty() && !send(blobs, fds)) return false;
    auto program = Blob::copy_of(text.value_or(built.program.to_json()));
    if (!program) return false;
    return send(messages::RunProgram{"request-1", 1 << 20, max_returned_bytes}, {program->fd()});
  }
  // Messages until the program's result (progress and the like skipped); nullopt when none came.
  std::optional<messages::RunResult> result() {
    while (auto received = next())
      if (auto* result = std::get_if<messages::RunResult>(&received->message)) return std::move(*result);
    return std::nullopt;
  }
};

}  // namespace kcoral::test
