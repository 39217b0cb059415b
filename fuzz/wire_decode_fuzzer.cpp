// Fuzz target: messages::decode (kcoral-server/channel/messages.cpp), how the front reads every
// frame a worker or the zygote sends it. Workers run the clients' code, so these frames
// are hostile input.
//
// Input: one byte, the number of descriptors that came with the frame, then the frame's
// text. Beyond what the sanitizers catch, it checks that an accepted message declares
// exactly the descriptors that came, and that its encoding decodes to a message of the
// same encoding (the strict decoder and the encoder agree).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "invariant.hpp"
#include "messages.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::size_t descriptors = data[0];
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto message = kcoral::messages::decode(text, descriptors);
  if (!message) {
    KCORAL_INVARIANT(message.error().kind == kcoral::ErrorKind::engine);
    return 0;
  }
  KCORAL_INVARIANT(kcoral::messages::descriptor_count(*message) == descriptors);
  std::string encoded = kcoral::messages::encode(*message);
  auto again = kcoral::messages::decode(encoded, descriptors);
  KCORAL_INVARIANT(again.has_value());
  KCORAL_INVARIANT(again->index() == message->index());
  KCORAL_INVARIANT(kcoral::messages::encode(*again) == encoded);
  return 0;
}
