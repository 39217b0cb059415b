// Fuzz target: messages::decode (kcoral-server/channel/messages.cpp) on large frames
// (large_text.hpp): frames of megabytes, as the text of a frame, a result's values, output
// and a text field of its object, nesting a million deep and floods of values among them. It must decode each in
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
    default: {  // a result whose returned values or output are the text, or its retirement reason, quoted
      std::string quoted = nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      int field = data[0] % 5;
      // The values follow the object as they are, then the output (stdout here).
      frame = std::string(R"({"type":"result","continues":false,"stdout_bytes":)") +
              std::to_string(field == 3 ? text.size() : 0) +
              R"(,"stdout_truncated":false,"stderr_bytes":0,"stderr_truncated":false,"elapsed_ms":0,"part_sizes":[])" +
              R"(,"retired":)" + (field == 4 ? quoted : "\"\"") + R"(,"multi_stream":false,"part_blobs":[]})" +
              "\n" + (field == 2 ? text : "{}") + (field == 3 ? text : "");
    }
  }
  auto message = kcoral::messages::decode(frame, 0);
  auto moved = kcoral::messages::decode_in_place(std::string(frame), 0);  // a result's values take the buffer
  KCORAL_INVARIANT(moved.has_value() == message.has_value());
  if (message && std::holds_alternative<kcoral::messages::RunResult>(*message)) {
    const auto& in_place = std::get<kcoral::messages::RunResult>(*moved);
    const auto& copied = std::get<kcoral::messages::RunResult>(*message);
    KCORAL_INVARIANT(in_place.results == copied.results && in_place.stdout_text == copied.stdout_text);
    if (data[0] % 5 == 3) KCORAL_INVARIANT(copied.stdout_text == text && copied.results == "{}");
  }
  if (!message) {
    KCORAL_INVARIANT(message.error().kind == kcoral::ErrorKind::engine);
    return 0;
  }
  auto again = kcoral::messages::decode(kcoral::messages::encode(*message), 0);
  KCORAL_INVARIANT(again.has_value() && again->index() == message->index());
  return 0;
}
