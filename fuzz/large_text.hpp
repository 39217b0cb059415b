// large_text: a short fuzz input read as the recipe of a long text, so that libFuzzer's
// small inputs reach what only large ones reveal: numbers of megabytes, strings of
// millions of escapes, nesting a million deep, floods of values.
//
// The input is a list of steps of three bytes: what to write (the first byte's five low
// bits) and how many times. Most steps are short, so that random inputs stay mostly small
// and fast to judge, with megabytes among them: up to 255 times (the second byte); up to
// 4095 when the first byte's three high bits are set (with the third byte's low four
// bits); 256 times that when the third byte's four high bits are set too (one step in
// 128). A step that copies input writes up to 63 of the bytes that follow it instead. The
// text stops growing at `max_bytes` (kMaxLargeText by default).
//
//   std::string text = kcoral::fuzz::large_text(data, size);
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace kcoral::fuzz {

inline constexpr std::size_t kMaxLargeText = std::size_t{4} << 20;

inline std::string large_text(const std::uint8_t* data, std::size_t size, std::size_t max_bytes = kMaxLargeText) {
  // Pieces of JSON that, repeated, make the shapes named above (and their broken forms).
  static constexpr std::string_view kPieces[] = {
      "[",  "]",  R"({"k":)", "}",  "7",  "0",  R"(")", "x",  R"(\u00e9)", R"(\ud83d\ude00)",
      ",1", ",",  ":",        " ",  "-",  ".",  "e",    "\n", R"({"type":"array","value":[)", "]}",
      R"("part":"return:0")", R"({"type":"bytes","part":"return:)", R"("})", "true", "null", R"(\)",
  };
  constexpr std::size_t kCopy = std::size(kPieces);  // the step that copies input bytes
  std::string text;
  std::size_t at = 0;
  while (at + 3 <= size && text.size() < max_bytes) {
    std::uint8_t what = data[at];
    std::size_t times = data[at + 1];
    if ((what & 0xE0) == 0xE0) {
      times |= std::size_t{data[at + 2] & 0x0Fu} << 8;
      if ((data[at + 2] & 0xF0) == 0xF0) times *= 256;
    }
    at += 3;
    std::size_t step = (what & 0x1F) % (kCopy + 1);
    if (step == kCopy) {
      std::size_t n = std::min(times % 64, size - at);
      text.append(reinterpret_cast<const char*>(data + at), n);
      at += n;
      continue;
    }
    std::string_view piece = kPieces[step];
    std::size_t bytes = std::min(times, (max_bytes - text.size()) / piece.size()) * piece.size();
    if (bytes == 0) continue;
    // Doubling what is written so far: a few copies, not one call per piece.
    std::size_t start = text.size();
    text.append(piece);
    while (text.size() - start < bytes) text.append(text, start, std::min(text.size() - start, bytes - (text.size() - start)));
  }
  return text;
}

}  // namespace kcoral::fuzz
