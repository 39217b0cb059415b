// check_returned_values: one forward scan of the worker's text, with an explicit stack.
//
// Why a scan of our own rather than a JSON library: Python integers of any size must pass
// exactly as the client will read them, and no parser at hand both keeps such numbers and
// bounds its memory. nlohmann refuses a number beyond a double; simdjson's on-demand parser
// indexes every structural character first (four bytes of index per byte of text: over a
// gigabyte for a result at the response limit) and leaves the walk, with its recursion, to
// its caller. What this file decides is small and fixed (RFC 8259's grammar, nothing
// converted), UTF-8 is simdjson's check, and returned_values_fuzzer compares its verdicts
// with nlohmann's on every input both can judge.
#include "returned_values.hpp"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <vector>

namespace kcoral {
namespace {

// Decoded text of a string, kept only as far as a comparison needs it.
class Prefix {
 public:
  explicit Prefix(std::size_t capacity) : capacity_(capacity) {}
  void clear() {
    text_.clear();
    whole_ = true;
  }
  void push(char c) {
    if (text_.size() < capacity_) text_.push_back(c);
    else whole_ = false;
  }
  void append(std::string_view run) {
    std::size_t room = capacity_ - text_.size();
    if (run.size() > room) whole_ = false;
    text_.append(run.substr(0, room));
  }
  void push_code_point(std::uint32_t code) {
    if (code < 0x80) return push(static_cast<char>(code));
    // Never one of the ASCII names compared with; kept as UTF-8 for messages.
    char bytes[4];
    std::size_t n = 0;
    if (code < 0x800) {
      bytes[n++] = static_cast<char>(0xC0 | (code >> 6));
    } else if (code < 0x10000) {
      bytes[n++] = static_cast<char>(0xE0 | (code >> 12));
      bytes[n++] = static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    } else {
      bytes[n++] = static_cast<char>(0xF0 | (code >> 18));
      bytes[n++] = static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      bytes[n++] = static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    }
    bytes[n++] = static_cast<char>(0x80 | (code & 0x3F));
    for (std::size_t i = 0; i < n; ++i) push(bytes[i]);
  }
  [[nodiscard]] bool is(std::string_view text) const { return whole_ && text_ == text; }
  [[nodiscard]] const std::string& text() const { return text_; }
  [[nodiscard]] bool whole() const { return whole_; }

 private:
  std::size_t capacity_;
  std::string text_;
  bool whole_ = true;
};

class Scan {
 public:
  Scan(std::string_view text, std::size_t parts) : text_(text), named_(parts, false) {}

  std::expected<void, ReturnedValuesRefusal> run() {
    if (!simdjson::validate_utf8(text_.data(), text_.size())) return malformed("text that is not UTF-8");
    skip_space();
    if (at_end() || text_[pos_] != '{') return not_one_object();
    enum class Expect { value, first_value, first_key, key, colon, after_value };
    Expect expect = Expect::value;
    bool naming = false;  // the value being read is that of a "part" field
    for (;;) {
      skip_space();
      if (at_end()) {
        if (expect == Expect::after_value && open_.empty()) break;
        return malformed("it ends inside a value");
      }
      char c = text_[pos_];
      switch (expect) {
        case Expect::first_value:
          if (c == ']') {
            ++pos_;
            open_.pop_back();
            expect = Expect::after_value;
            continue;
          }
          [[fallthrough]];
        case Expect::value:
          if (c == '{' || c == '[') {
            if (open_.size() == kMaxReturnedJsonDepth) return too_deep();
            open_.push_back(c == '{');
            ++pos_;
            expect = c == '{' ? Expect::first_key : Expect::first_value;
            naming = false;
            continue;
          }
          if (c == '"') {
            if (!string(part_name_)) return malformed("a malformed string");
            if (naming && !name_part()) return refuse(ErrorKind::engine, "a result whose returned values " + problem_);
          } else if (c == '-' || (c >= '0' && c <= '9')) {
            if (!number()) return malformed("a malformed number");
          } else if (!literal("true") && !literal("false") && !literal("null")) {
            return malformed("a malformed value");
          }
          naming = false;
          expect = Expect::after_value;
          continue;
        case Expect::first_key:
          if (c == '}') {
            ++pos_;
            open_.pop_back();
            expect = Expect::after_value;
            continue;
          }
          [[fallthrough]];
        case Expect::key: {
          // A top-level key is kept longer: it names the return a refusal is about.
          Prefix& key = open_.size() == 1 ? top_key_ : key_;
          if (c != '"' || !string(key)) return malformed("a malformed field name");
          naming = key.is("part");
          expect = Expect::colon;
          continue;
        }
        case Expect::colon:
          if (c != ':') return malformed("a field without its ':'");
          ++pos_;
          expect = Expect::value;
          continue;
        case Expect::after_value:
          if (open_.empty()) return not_one_object();  // something after the object
          ++pos_;
          if (c == ',') {
            expect = open_.back() ? Expect::key : Expect::value;
          } else if (c == (open_.back() ? '}' : ']')) {
            open_.pop_back();
          } else {
            return malformed("a value followed by neither ',' nor its container's end");
          }
          continue;
      }
    }
    if (std::find(named_.begin(), named_.end(), false) != named_.end())
      return refuse(ErrorKind::engine, "a result with a part its returned values do not name");
    return {};
  }

 private:
  [[nodiscard]] bool at_end() const { return pos_ == text_.size(); }

  void skip_space() {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t'))
      ++pos_;
  }

  // RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, of any length. What follows
  // it is the caller's to judge (so "01" fails there, at the '1').
  bool number() {
    auto digits = [&] {
      std::size_t start = pos_;
      while (!at_end() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ > start;
    };
    if (text_[pos_] == '-') ++pos_;
    if (at_end()) return false;
    if (text_[pos_] == '0') ++pos_;
    else if (!digits()) return false;
    if (!at_end() && text_[pos_] == '.') {
      ++pos_;
      if (!digits()) return false;
    }
    if (!at_end() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (!at_end() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digits()) return false;
    }
    return true;
  }

  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // Four hex digits of a \u escape.
  bool hex4(std::uint32_t& code) {
    if (text_.size() - pos_ < 4) return false;
    auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, code, 16);
    if (ec != std::errc() || end != text_.data() + pos_ + 4) return false;
    pos_ += 4;
    return true;
  }

  // A string from its opening quote, decoded into `out` as far as `out` keeps it.
  // Refused: raw control characters, unknown escapes, lone surrogates.
  bool string(Prefix& out) {
    out.clear();
    ++pos_;
    while (!at_end()) {
      // A run of plain characters at once: most strings are nothing else.
      std::size_t run = pos_;
      while (run < text_.size() && text_[run] != '"' && text_[run] != '\\' &&
             static_cast<unsigned char>(text_[run]) >= 0x20)
        ++run;
      out.append(text_.substr(pos_, run - pos_));
      pos_ = run;
      if (at_end()) return false;
      char c = text_[pos_++];
      if (c == '"') return true;
      if (c != '\\') return false;  // a raw control character
      if (at_end()) return false;
      char escaped = text_[pos_++];
      switch (escaped) {
        case '"': case '\\': case '/': out.push(escaped); break;
        case 'b': out.push('\b'); break;
        case 'f': out.push('\f'); break;
        case 'n': out.push('\n'); break;
        case 'r': out.push('\r'); break;
        case 't': out.push('\t'); break;
        case 'u': {
          std::uint32_t code = 0;
          if (!hex4(code) || (code >= 0xDC00 && code <= 0xDFFF)) return false;
          if (code >= 0xD800 && code <= 0xDBFF) {
            std::uint32_t low = 0;
            if (text_.substr(pos_, 2) != "\\u") return false;
            pos_ += 2;
            if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          out.push_code_point(code);
          break;
        }
        default: return false;
      }
    }
    return false;
  }

  // The value of a "part" field just read (into part_name_): "return:<index>", each once.
  bool name_part() {
    const std::string& name = part_name_.text();
    std::size_t index = 0;
    const char* digits = name.data() + std::min<std::size_t>(7, name.size());
    auto [end, ec] = std::from_chars(digits, name.data() + name.size(), index);
    if (!part_name_.whole() || !name.starts_with("return:") || ec != std::errc() ||
        end != name.data() + name.size() || index >= named_.size() || named_[index]) {
      problem_ = "name a part wrongly: '" + name.substr(0, 40) + "'";
      return false;
    }
    named_[index] = true;
    return true;
  }

  std::unexpected<ReturnedValuesRefusal> refuse(ErrorKind kind, std::string message) {
    return std::unexpected(ReturnedValuesRefusal{{kind, std::move(message)}, top_key_.text()});
  }
  std::unexpected<ReturnedValuesRefusal> malformed(const std::string& why) {
    return refuse(ErrorKind::engine, "a result whose returned values are not valid JSON (" + why + " at byte " +
                                         std::to_string(pos_) + ")");
  }
  std::unexpected<ReturnedValuesRefusal> not_one_object() {
    return refuse(ErrorKind::engine, "a result whose returned values are not one JSON object");
  }
  std::unexpected<ReturnedValuesRefusal> too_deep() {
    return refuse(ErrorKind::serialization, "returned values nested deeper than " +
                                                std::to_string(kMaxReturnedValueDepth) +
                                                " levels cannot travel; they were dropped");
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::vector<bool> open_;  // the containers open now, innermost last: true for an object
  std::vector<bool> named_;
  Prefix key_{64};
  Prefix top_key_{1024};
  Prefix part_name_{32};
  std::string problem_;
};

}  // namespace

std::expected<void, ReturnedValuesRefusal> check_returned_values(std::string_view results, std::size_t parts) {
  return Scan(results, parts).run();
}

}  // namespace kcoral
