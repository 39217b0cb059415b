// Strict multipart/form-data framing (RFC 7578): no preamble, CRLF line ends, one
// Content-Disposition of type form-data with a name per part, binary payloads only.
#include "kcoral/multipart.hpp"

#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <optional>
#include <random>
#include <utility>

#include "byte_search.hpp"
#include "kcoral/multipart_digests.hpp"

namespace kcoral {
namespace {

constexpr std::string_view kCrlf = "\r\n";

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

struct Parameter {
  std::string key;  // lowercased
  std::string value;
};

// Splits `type; key=value; key="quoted \"value\""` into the type and its parameters.
Result<std::vector<Parameter>> parse_parameters(std::string_view header, std::string& type) {
  std::size_t semicolon = header.find(';');
  type = lowercase(trim(header.substr(0, semicolon)));
  std::vector<Parameter> parameters;
  std::size_t pos = semicolon == std::string_view::npos ? header.size() : semicolon + 1;
  while (pos < header.size()) {
    while (pos < header.size() && (header[pos] == ' ' || header[pos] == '\t')) ++pos;
    std::size_t equals = header.find('=', pos);
    if (equals == std::string_view::npos) return fail(ErrorKind::parse, "a header parameter has no value");
    Parameter parameter{lowercase(trim(header.substr(pos, equals - pos))), {}};
    pos = equals + 1;
    if (pos < header.size() && header[pos] == '"') {
      ++pos;
      bool closed = false;
      while (pos < header.size()) {
        char c = header[pos++];
        if (c == '"') { closed = true; break; }
        if (c == '\\' && pos < header.size()) c = header[pos++];
        parameter.value += c;
      }
      if (!closed) return fail(ErrorKind::parse, "a quoted header parameter is not closed");
      while (pos < header.size() && (header[pos] == ' ' || header[pos] == '\t')) ++pos;
      if (pos < header.size() && header[pos] != ';')
        return fail(ErrorKind::parse, "unexpected text after a quoted header parameter");
    } else {
      std::size_t end = header.find(';', pos);
      parameter.value = std::string(trim(header.substr(pos, end - pos)));
      pos = end == std::string_view::npos ? header.size() : end;
    }
    if (parameter.key.empty()) return fail(ErrorKind::parse, "a header parameter has no name");
    parameters.push_back(std::move(parameter));
    if (pos < header.size()) ++pos;  // the ';'
  }
  return parameters;
}

Result<MultipartPart> parse_part_headers(std::string_view block) {
  MultipartPart part;
  int dispositions = 0, content_types = 0;
  while (!block.empty()) {
    std::size_t end = block.find(kCrlf);
    std::string_view line = block.substr(0, end);
    block = end == std::string_view::npos ? std::string_view() : block.substr(end + 2);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0 || line.front() == ' ' || line.front() == '\t')
      return fail(ErrorKind::parse, "malformed multipart part header line");
    std::string name = lowercase(line.substr(0, colon));
    std::string_view value = trim(line.substr(colon + 1));
    if (name == "content-disposition") {
      ++dispositions;
      std::string type;
      auto parameters = parse_parameters(value, type);
      if (!parameters) return std::unexpected(parameters.error());
      if (type != "form-data")
        return fail(ErrorKind::parse, "multipart parts must have Content-Disposition: form-data");
      int names = 0;
      for (Parameter& p : *parameters) {
        if (p.key == "name") {
          ++names;
          part.name = std::move(p.value);
        }
      }
      if (names != 1 || part.name.empty())
        return fail(ErrorKind::parse, "a multipart part needs exactly one non-empty name");
    } else if (name == "content-type") {
      ++content_types;
      part.content_type = media_type(value);
    } else if (name == "content-transfer-encoding") {
      std::string encoding = lowercase(value);
      if (encoding != "binary" && encoding != "8bit")
        return fail(ErrorKind::parse, "encoded multipart parts are not supported (use binary)");
    }
  }
  if (dispositions != 1)
    return fail(ErrorKind::parse, "each multipart part needs exactly one Content-Disposition");
  if (content_types != 1)
    return fail(ErrorKind::parse, "multipart part '" + part.name +
                                      "' needs exactly one Content-Type");
  return part;
}

// 128 bits nobody can foresee, a worker that wrote the parts included: OpenSSL's
// generator, or the kernel's where that fails.
std::string random_boundary() {
  std::array<unsigned char, 16> bits{};
  if (RAND_bytes(bits.data(), static_cast<int>(bits.size())) != 1) {
    std::random_device device;
    for (unsigned char& byte : bits) byte = static_cast<unsigned char>(device());
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string boundary = "kcoral-";
  for (unsigned char byte : bits) boundary.append({kHex[byte >> 4], kHex[byte & 0xf]});
  return boundary;
}

// Parts up to this size are searched for the boundary before it is used. A larger one is
// not: searching 64 MiB takes 5-10 ms (faulting in the pages of a memory file's mapping),
// and a boundary of 128 bits drawn after the part was written occurs in 64 MiB with a chance
// of about 2^-102. Were it there anyway, the receiver, which checks each part against its
// SHA-256, would refuse the body rather than misread it.
constexpr std::size_t kSearchedPartBytes = std::size_t{1} << 20;

}  // namespace

std::string media_type(std::string_view content_type) {
  return lowercase(trim(content_type.substr(0, content_type.find(';'))));
}

Result<std::string> multipart_boundary(std::string_view content_type) {
  std::string type;
  auto parameters = parse_parameters(content_type, type);
  if (!parameters || type != "multipart/form-data")
    return fail(ErrorKind::parse, "the request must be multipart/form-data");
  std::string boundary;
  for (const Parameter& p : *parameters) {
    if (p.key == "boundary") boundary = p.value;
  }
  if (boundary.empty() || boundary.size() > 200 ||
      boundary.find_first_of("\r\n") != std::string::npos)
    return fail(ErrorKind::parse, "the multipart Content-Type has no valid boundary");
  return boundary;
}

Result<std::vector<MultipartPart>> parse_multipart(std::string_view content_type, std::string_view body,
                                                   const MultipartLimits& limits, const MultipartDigests* found) {
  auto boundary = multipart_boundary(content_type);
  if (!boundary) return std::unexpected(boundary.error());
  const std::string delimiter = "--" + *boundary;
  const std::string separator = "\r\n" + delimiter;

  if (!body.starts_with(delimiter))
    return fail(ErrorKind::parse, "the multipart body does not start with its boundary");
  std::vector<MultipartPart> parts;
  std::size_t pos = delimiter.size();
  while (true) {
    if (body.substr(pos, 2) == "--") {
      std::string_view rest = body.substr(pos + 2);
      if (!rest.empty() && rest != kCrlf)
        return fail(ErrorKind::parse, "unexpected content after the closing multipart boundary");
      break;
    }
    if (body.substr(pos, 2) != kCrlf)
      return fail(ErrorKind::parse, "a multipart boundary is not followed by CRLF");
    pos += 2;
    if (parts.size() == limits.max_parts)
      return fail(ErrorKind::parse, "the request has more than " + std::to_string(limits.max_parts) +
                                        " multipart parts");
    std::size_t headers_end = body.substr(pos, limits.max_part_header_bytes + 4).find("\r\n\r\n");
    std::string_view block;
    std::size_t data_start;
    if (body.substr(pos, 2) == kCrlf) {
      data_start = pos + 2;  // a part with no headers; rejected below
    } else if (headers_end == std::string_view::npos) {
      return fail(ErrorKind::parse, "multipart part headers are missing or longer than " +
                                        std::to_string(limits.max_part_header_bytes) + " bytes");
    } else {
      block = body.substr(pos, headers_end);
      data_start = pos + headers_end + 4;
    }
    auto part = parse_part_headers(block);
    if (!part) return std::unexpected(part.error());
    std::size_t data_end = std::string_view::npos;
    if (auto size = found ? found->size_at(data_start) : std::nullopt;
        size && *size <= body.size() - data_start && body.substr(data_start + *size, separator.size()) == separator)
      data_end = data_start + *size;  // where the search while it arrived found the first one
    else
      data_end = find_bytes(body, separator, data_start);
    if (data_end == std::string_view::npos)
      return fail(ErrorKind::parse, "the multipart body ends without its closing boundary");
    part->data = body.substr(data_start, data_end - data_start);
    parts.push_back(std::move(*part));
    pos = data_end + separator.size();
  }
  if (parts.empty()) return fail(ErrorKind::parse, "the multipart body has no parts");
  return parts;
}

MultipartFrame frame_multipart(const std::vector<OutgoingPart>& parts) {
  std::string boundary;
  bool clash = true;
  while (clash) {
    boundary = random_boundary();
    clash = std::any_of(parts.begin(), parts.end(), [&](const OutgoingPart& part) {
      return part.data.size() <= kSearchedPartBytes && find_bytes(part.data, boundary) != std::string_view::npos;
    });
  }
  MultipartFrame frame{"multipart/form-data; boundary=" + boundary, {}};
  std::string text;
  for (const OutgoingPart& part : parts) {
    text.append("--").append(boundary).append(kCrlf);
    text.append("Content-Disposition: form-data; name=\"").append(part.name).append("\"\r\n");
    text.append("Content-Type: ").append(part.content_type).append("\r\n\r\n");
    frame.texts.push_back(std::exchange(text, std::string(kCrlf)));
  }
  text.append("--").append(boundary).append("--\r\n");
  frame.texts.push_back(std::move(text));
  return frame;
}

EncodedMultipart encode_multipart(const std::vector<OutgoingPart>& parts) {
  MultipartFrame frame = frame_multipart(parts);
  std::size_t size = 0;
  for (const std::string& text : frame.texts) size += text.size();
  for (const OutgoingPart& part : parts) size += part.data.size();
  EncodedMultipart out{std::move(frame.content_type), {}};
  out.body.reserve(size);
  for (std::size_t i = 0; i < parts.size(); ++i) out.body.append(frame.texts[i]).append(parts[i].data);
  out.body.append(frame.texts.back());
  return out;
}

}  // namespace kcoral
