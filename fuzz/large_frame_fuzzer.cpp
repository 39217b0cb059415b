// Fuzz target: messages::decode (kcoral-server/channel/messages.cpp) on large frames
// (large_text.hpp): frames of megabytes, as the text of a frame and as the text fields of a
// result, nesting a million deep and floods of values among them. It must decode each in
// time and memory linear in the frame (libFuzzer's -rss_limit_mb catches a frame that
// costs a tree of its size), without recursion; an accepted message re-encodes to a frame
// that decodes again.
//
// Input: one byte choosing where the text goes, then the recipe of the text.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "invariant.hpp"
#include "large_text.hpp"
#include "messages.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // Ordinary steps write up to 1 KiB, past the frame's nesting limit (one level): each byte
  // costs three instrumented passes of nlohmann (decode, encode, decode).
  std::string text = kcoral::fuzz::large_text(data + 1, size - 1, kcoral::fuzz::kMaxLargeText, 1024);
  std::string frame;
  switch (data[0] % 5) {
    case 0: frame = text; break;  // the frame itself
    case 1: frame = R"({"type":"progress","index":)" + text + "}"; break;
    default: {  // a result whose returned values, output or retirement reason are the text, quoted
      std::string quoted = nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      int field = data[0] % 5;
      frame = std::string(R"({"type":"result","continues":false,"stdout":)") + (field == 3 ? quoted : "\"\"") +
              R"(,"stdout_truncated":false,"stderr":"","stderr_truncated":false,"elapsed_ms":0,"part_sizes":[])" +
              R"(,"retired":)" + (field == 4 ? quoted : "\"\"") + R"(,"multi_stream":false,"part_blobs":[]})" +
              "\n" + (field == 2 ? text : "{}");  // the values follow the object as they are
    }
  }
  auto message = kcoral::messages::decode(frame, 0);
  auto moved = kcoral::messages::decode_in_place(std::string(frame), 0);  // a result's values take the buffer
  KCORAL_INVARIANT(moved.has_value() == message.has_value());
  if (message && std::holds_alternative<kcoral::messages::RunResult>(*message))
    KCORAL_INVARIANT(std::get<kcoral::messages::RunResult>(*moved).results ==
                     std::get<kcoral::messages::RunResult>(*message).results);
  if (!message) {
    KCORAL_INVARIANT(message.error().kind == kcoral::ErrorKind::engine);
    return 0;
  }
  auto again = kcoral::messages::decode(kcoral::messages::encode(*message), 0);
  KCORAL_INVARIANT(again.has_value() && again->index() == message->index());
  return 0;
}
