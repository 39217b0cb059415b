// large_text: a short fuzz input read as the recipe of a long text, so that libFuzzer's
// small inputs reach what only large ones reveal: numbers of megabytes, strings of
// millions of escapes, nesting a million deep, floods of values.
//
// The input is a list of steps of three bytes: what to write (the first byte's five low
// bits) and how many times. Most steps are short, so that random inputs stay small and fast
// to judge: up to 255 times (the second byte); up to 4095 when the first byte's three high
// bits are set (with the third byte's low four bits). Together these ordinary steps write
// at most `ordinary_bytes` (kOrdinaryText by default). A step that copies input writes up to 63 of the bytes that
// follow it instead, within that budget. A huge step, the bytes FF FF and the piece's
// index, writes its piece 2^20 times; together huge steps write at most `max_bytes`
// (kMaxLargeText, 2 MiB, by default: a million levels of nesting opened and closed, a
// megabyte number or string).
//
// Huge steps count only in one input in kHugeOneIn, those whose FNV-1a hash is a multiple
// of it (elsewhere they write nothing). A megabyte text costs a thousand times a kilobyte
// one to judge (under ASan, milliseconds for the returned values' scan, half a second for
// a frame's decode and round trip), and libFuzzer learns the bytes FF FF from the
// comparison at once and would put them in most inputs; a long run must still reach 10^7
// inputs. A hash it cannot steer keeps megabyte texts to a few in a thousand, and
// fuzz/make_seeds.py pads its megabyte seeds with a step that writes nothing until their
// hash qualifies.
//   std::string text = kcoral::fuzz::large_text(data, size);
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace kcoral::fuzz {

inline constexpr std::size_t kMaxLargeText = std::size_t{2} << 20;
inline constexpr std::size_t kOrdinaryText = std::size_t{4} << 10;  // past every limit of the checks: nesting (515), a double's digits
inline constexpr std::uint64_t kHugeOneIn = 256;

// FNV-1a, 64 bits: fuzz/make_seeds.py computes the same.
inline std::uint64_t fnv1a(const std::uint8_t* data, std::size_t size) {
  std::uint64_t hash = 0xcbf29ce484222325u;
  for (std::size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 0x100000001b3u;
  return hash;
}

inline std::string large_text(const std::uint8_t* data, std::size_t size, std::size_t max_bytes = kMaxLargeText,
                              std::size_t ordinary_bytes = kOrdinaryText) {
  // Pieces of JSON that, repeated, make the shapes named above (and their broken forms).
  static constexpr std::string_view kPieces[] = {
      "[",  "]",  R"({"k":)", "}",  "7",  "0",  R"(")", "x",  R"(\u00e9)", R"(\ud83d\ude00)",
      ",1", ",",  ":",        " ",  "-",  ".",  "e",    "\n", R"({"type":"array","value":[)", "]}",
      R"("part":"return:0")", R"({"type":"bytes","part":"return:)", R"("})", "true", "null", R"(\)",
  };
  constexpr std::size_t kCopy = std::size(kPieces);  // the step that copies input bytes
  std::string text;
  std::size_t ordinary = 0, huge = 0;  // bytes written by each kind of step
  std::size_t huge_budget = fnv1a(data, size) % kHugeOneIn == 0 ? max_bytes : 0;
  for (std::size_t at = 0; at + 3 <= size;) {
    const std::uint8_t* step = data + at;
    at += 3;
    bool is_huge = step[0] == 0xFF && step[1] == 0xFF;
    std::size_t times = is_huge ? std::size_t{1} << 20 : step[1];
    if (!is_huge && (step[0] & 0xE0) == 0xE0) times |= std::size_t{step[2] & 0x0Fu} << 8;
    std::size_t room = is_huge ? huge_budget - huge : ordinary_bytes - ordinary;
    std::size_t index = (is_huge ? step[2] : step[0] & 0x1F) % (kCopy + 1);
    if (index == kCopy) {
      std::size_t n = std::min({times % 64, size - at, room});
      text.append(reinterpret_cast<const char*>(data + at), n);
      (is_huge ? huge : ordinary) += n;
      at += n;
      continue;
    }
    std::string_view piece = kPieces[index];
    std::size_t bytes = std::min(times, room / piece.size()) * piece.size();
    if (bytes == 0) continue;
    (is_huge ? huge : ordinary) += bytes;
    // Doubling what is written so far: a few copies, not one call per piece.
    std::size_t start = text.size();
    text.append(piece);
    while (text.size() - start < bytes) text.append(text, start, std::min(text.size() - start, bytes - (text.size() - start)));
  }
  return text;
}

}  // namespace kcoral::fuzz
