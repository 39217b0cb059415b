// multipart/form-data: the framing of requests (program + blobs) and of responses with
// binary results. Parsing is strict and bounded; parts are views into the body.
//
//   auto parts = kcoral::parse_multipart(content_type, body, {});
//   for (const auto& part : *parts) use(part.name, part.content_type, part.data);
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kcoral/error.hpp"

namespace kcoral {

class MultipartDigests;

struct MultipartLimits {
  std::size_t max_parts = 100000;
  std::size_t max_part_header_bytes = 8192;
};

// One part; `data` points into the parsed body, which must outlive it.
struct MultipartPart {
  std::string name;          // from Content-Disposition: form-data; name="..."
  std::string content_type;  // media type, lowercased, parameters dropped
  std::string_view data;
};

// The boundary of a multipart/form-data Content-Type value; `parse` when it is another
// type or its boundary is missing or invalid.
[[nodiscard]] Result<std::string> multipart_boundary(std::string_view content_type);

// Parses a multipart/form-data body. `content_type` is the request's header value, which
// carries the boundary. A part whose end `found` knows (the digests computed while this
// very body arrived) is not searched again for its delimiter: searching 64 MiB took 10-19
// ms, most of it faulting in the pages of the body's mapping.
[[nodiscard]] Result<std::vector<MultipartPart>> parse_multipart(std::string_view content_type, std::string_view body,
                                                               const MultipartLimits& limits,
                                                               const MultipartDigests* found = nullptr);

// A part to encode: name, media type and bytes.
struct OutgoingPart {
  std::string_view name;
  std::string_view content_type;
  std::string_view data;
};

struct EncodedMultipart {
  std::string content_type;  // "multipart/form-data; boundary=..."
  std::string body;
};

// Encodes parts with a fresh random boundary (128 bits) that occurs in none of them: parts up
// to 1 MiB are searched for it, larger ones trust its chance (2^-102 in 64 MiB).
[[nodiscard]] EncodedMultipart encode_multipart(const std::vector<OutgoingPart>& parts);

// The same framing without the parts' data, for a body that sends the data from where it
// lies: texts[i] goes before part i's data, and texts[parts.size()] after the last.
struct MultipartFrame {
  std::string content_type;  // "multipart/form-data; boundary=..."
  std::vector<std::string> texts;
};
[[nodiscard]] MultipartFrame frame_multipart(const std::vector<OutgoingPart>& parts);

// The media type of a Content-Type value: lowercased, parameters and spaces dropped.
[[nodiscard]] std::string media_type(std::string_view content_type);

}  // namespace kcoral
