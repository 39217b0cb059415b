// Helpers shared by the libkcoral tests: placeholder digests and wire programs written as
// short JSON snippets, so each test reads as the program it sends.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kcoral/program.hpp"

namespace kcoral::test {

// A well-formed digest made of one repeated hex digit ('a' -> "aaaa…", 64 digits).
inline std::string digest_of_char(char c) { return std::string(64, c); }

// Replaces the placeholders $A, $B, $C with the digests "aaa…", "bbb…", "ccc…".
inline std::string with_digests(std::string text) {
  for (char c : {'A', 'B', 'C'}) {
    std::string placeholder = std::string("$") + c;
    std::string digest = digest_of_char(static_cast<char>(c - 'A' + 'a'));
    for (std::size_t pos = text.find(placeholder); pos != std::string::npos;
         pos = text.find(placeholder, pos + digest.size()))
      text.replace(pos, placeholder.size(), digest);
  }
  return text;
}

// `{"instructions":[<instructions>]}`, with `,"options":<options>` when given.
inline std::string program_of(std::string_view instructions, std::string_view options = {}) {
  std::string out = "{\"instructions\":[" + std::string(instructions) + "]";
  if (!options.empty()) out += ",\"options\":" + std::string(options);
  return with_digests(out + "}");
}

// The error of a program that must not parse (nullopt when it parsed).
inline std::optional<Error> parse_failure(std::string_view json, const ProgramLimits& limits = {}) {
  auto program = Program::parse(json, limits);
  if (program) return std::nullopt;
  return program.error();
}

// Whether the text parses as a program.
inline bool parses(std::string_view json, const ProgramLimits& limits = {}) {
  return Program::parse(json, limits).has_value();
}

inline constexpr std::string_view kModule =
    R"({"op":"upload","id":"m","kind":"module","source":"def f(*a):\n    return a\n"})";
inline constexpr std::string_view kFunction =
    R"({"op":"get_function","id":"f","module":{"$ref":"m"},"name":"f"})";

}  // namespace kcoral::test
