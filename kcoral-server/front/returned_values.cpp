// check_returned_values: simdjson on demand over the worker's text, numbers left as text.
#include "returned_values.hpp"

#include <algorithm>
#include <charconv>
#include <regex>
#include <simdjson.h>
#include <string_view>
#include <vector>

namespace kcoral {
namespace {

class ResultsCheck {
 public:
  explicit ResultsCheck(std::size_t parts) : named_(parts, false) {}

  Status check(const std::string& results) {
    auto not_one_object = [] { return fail(ErrorKind::engine, "a result whose returned values are not one JSON object"); };
    simdjson::ondemand::parser parser;
    simdjson::padded_string padded(results);
    // A document stream, so that anything after the object shows as a second document.
    simdjson::ondemand::document_stream stream;
    if (parser.iterate_many(padded, std::max<std::size_t>(results.size(), 1024)).get(stream)) return not_one_object();
    std::size_t documents = 0;
    for (auto document : stream) {
      simdjson::ondemand::object top;
      if (++documents > 1 || document.get_object().get(top)) return not_one_object();
      for (auto field : top) {
        std::string_view key;  // unescaped, so that a malformed escape in a key is caught too
        simdjson::ondemand::value value;
        if (field.unescaped_key().get(key) || field.value().get(value) || !walk(value))
          return fail(ErrorKind::engine, "a result whose returned values are not valid JSON (" +
                                             (problem_.empty() ? std::string("a malformed field") : problem_) + ")");
      }
    }
    if (documents != 1 || stream.truncated_bytes() != 0) return not_one_object();
    if (std::find(named_.begin(), named_.end(), false) != named_.end())
      return fail(ErrorKind::engine, "a result with a part its returned values do not name");
    return {};
  }

 private:
  bool walk(simdjson::ondemand::value value) {
    simdjson::ondemand::json_type type;
    if (value.type().get(type)) return refuse("a malformed value");
    switch (type) {
      case simdjson::ondemand::json_type::object: {
        simdjson::ondemand::object object;
        if (value.get_object().get(object)) return refuse("a malformed object");
        for (auto field : object) {
          std::string_view key;
          simdjson::ondemand::value child;
          if (field.unescaped_key().get(key) || field.value().get(child)) return refuse("a malformed field");
          simdjson::ondemand::json_type child_type;
          if (key == "part" && !child.type().get(child_type) && child_type == simdjson::ondemand::json_type::string) {
            if (!name_part(child)) return false;
          } else if (!walk(child)) {
            return false;
          }
        }
        return true;
      }
      case simdjson::ondemand::json_type::array: {
        simdjson::ondemand::array array;
        if (value.get_array().get(array)) return refuse("a malformed array");
        for (auto element : array) {
          simdjson::ondemand::value child;
          if (element.get(child) || !walk(child)) return problem_.empty() ? refuse("a malformed array") : false;
        }
        return true;
      }
      case simdjson::ondemand::json_type::string: {
        std::string_view text;
        return !value.get_string().get(text) || refuse("a malformed string");
      }
      case simdjson::ondemand::json_type::boolean: {
        bool flag = false;
        return !value.get_bool().get(flag) || refuse("a malformed boolean");
      }
      case simdjson::ondemand::json_type::null: {
        bool null = false;
        return (!value.is_null().get(null) && null) || refuse("a malformed null");
      }
      case simdjson::ondemand::json_type::number: {
        // Any size passes, as the client reads it.
        std::string_view token = value.raw_json_token();
        // Most numbers fit a double: simdjson checks those itself, fast.
        double number = 0;
        if (!value.get_double().get(number)) return true;
        // The rest (beyond a double's range) on the text, RFC 8259's grammar.
        static const std::regex kNumber(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
        // JSON's whitespace only (not \v or \f, which simdjson leaves in the token).
        while (!token.empty() && std::string_view(" \t\n\r").find(token.back()) != std::string_view::npos)
          token.remove_suffix(1);
        return std::regex_match(token.begin(), token.end(), kNumber) || refuse("a malformed number");
      }
    }
    return refuse("a malformed value");
  }

  bool name_part(simdjson::ondemand::value value) {
    std::string_view name;
    if (value.get_string().get(name)) return refuse("a malformed part name");
    std::size_t index = 0;
    const char* digits = name.data() + std::min<std::size_t>(7, name.size());
    auto [end, ec] = std::from_chars(digits, name.data() + name.size(), index);
    if (!name.starts_with("return:") || ec != std::errc() || end != name.data() + name.size() || index >= named_.size() ||
        named_[index]) {
      problem_ = "it names a part wrongly: '" + std::string(name.substr(0, 40)) + "'";
      return false;
    }
    named_[index] = true;
    return true;
  }

  bool refuse(std::string why) {
    problem_ = std::move(why);
    return false;
  }

  std::vector<bool> named_;
  std::string problem_;
};

}  // namespace

Status check_returned_values(const std::string& results, std::size_t parts) {
  return ResultsCheck(parts).check(results);
}

}  // namespace kcoral
