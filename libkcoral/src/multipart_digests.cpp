// MultipartDigests: a multipart body's framing followed as it grows, each part's data
// hashed as soon as it is known not to be the start of the next delimiter.
#include "kcoral/multipart_digests.hpp"

#include <algorithm>
#include <new>

#include "byte_search.hpp"
#include "kcoral/multipart.hpp"

namespace kcoral {
namespace {

constexpr std::string_view kCrlf = "\r\n";
constexpr std::string_view kBlankLine = "\r\n\r\n";
// As parse_multipart bounds them.
const MultipartLimits kLimits{};

}  // namespace

MultipartDigests::MultipartDigests(std::string_view content_type, std::size_t record_from)
    : record_from_(record_from) {
  auto boundary = multipart_boundary(content_type);
  if (!boundary) return;
  delimiter_ = "--" + *boundary;
  separator_ = std::string(kCrlf) + delimiter_;
  state_ = State::opening;
}

void MultipartDigests::advance(std::string_view body) {
  while (true) {
    switch (state_) {
      case State::done:
        return;
      case State::opening:
        if (body.size() < delimiter_.size()) return;
        if (!body.starts_with(delimiter_)) {
          state_ = State::done;
          break;
        }
        position_ = delimiter_.size();
        state_ = State::after_delimiter;
        break;
      case State::after_delimiter: {
        if (body.size() < position_ + 2) return;
        std::string_view next = body.substr(position_, 2);
        if (next != kCrlf || parts_ == kLimits.max_parts) {  // "--" closes the body
          state_ = State::done;
          break;
        }
        position_ += 2;
        scanned_ = position_;
        ++parts_;
        state_ = State::headers;
        break;
      }
      case State::headers: {
        if (body.size() < position_ + 2) return;
        if (body.substr(position_, 2) == kCrlf) {  // a part without headers, which parse refuses
          state_ = State::done;
          break;
        }
        std::string_view window = body.substr(position_, kLimits.max_part_header_bytes + kBlankLine.size());
        std::size_t from = std::max(scanned_, position_ + kBlankLine.size() - 1) - (kBlankLine.size() - 1);
        std::size_t end = window.find(kBlankLine, from - position_);
        if (end == std::string_view::npos) {
          if (window.size() == kLimits.max_part_header_bytes + kBlankLine.size()) state_ = State::done;
          scanned_ = position_ + window.size();
          return;
        }
        data_start_ = position_ + end + kBlankLine.size();
        hashed_ = data_start_;
        scanned_ = data_start_;
        if (!hash_) {
          try {
            hash_.emplace();
          } catch (const std::bad_alloc&) {  // no hashing to be had: parse_execute_request hashes
            state_ = State::done;
            break;
          }
        }
        state_ = State::data;
        break;
      }
      case State::data: {
        std::size_t found = find_bytes(body, separator_, scanned_);
        if (found == std::string_view::npos) {
          // A delimiter not yet seen whole can only start in its last bytes.
          std::size_t safe = std::max(body.size() + 1, separator_.size() + hashed_) - separator_.size();
          hash_->update(body.substr(hashed_, safe - hashed_));
          hashed_ = safe;
          scanned_ = safe;
          return;
        }
        hash_->update(body.substr(hashed_, found - hashed_));
        std::string digest = hash_->hex_digest();  // and the hash starts over
        if (found - data_start_ >= record_from_) digests_.push_back({data_start_, found - data_start_, std::move(digest)});
        position_ = found + separator_.size();
        state_ = State::after_delimiter;
        break;
      }
    }
  }
}

const MultipartDigests::Digest* MultipartDigests::starting_at(std::size_t offset) const {
  auto it = std::lower_bound(digests_.begin(), digests_.end(), offset,
                             [](const Digest& digest, std::size_t at) { return digest.offset < at; });
  return it == digests_.end() || it->offset != offset ? nullptr : &*it;
}

const std::string* MultipartDigests::digest_of(std::size_t offset, std::size_t size) const {
  const Digest* digest = starting_at(offset);
  return digest == nullptr || digest->size != size ? nullptr : &digest->hex;
}

std::optional<std::size_t> MultipartDigests::size_at(std::size_t offset) const {
  const Digest* digest = starting_at(offset);
  return digest == nullptr ? std::nullopt : std::optional(digest->size);
}

}  // namespace kcoral
