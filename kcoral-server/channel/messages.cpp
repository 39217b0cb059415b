// The channel's messages as JSON: a field table per struct drives both the encoder and
// the strict decoder, so the two cannot disagree.
#include "messages.hpp"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

namespace kcoral::messages {
namespace {

using Json = nlohmann::json;

// A result's output follows its values, after its object, as it is (escaped in the object,
// tens of megabytes of it cost the receiver's JSON parser three times their size); the
// object says how long each stream is.
constexpr std::string_view kStdoutBytes = "stdout_bytes";
constexpr std::string_view kStderrBytes = "stderr_bytes";

// The values of one message, keys included: room for a result's part tables at their
// largest (a size and a blob's name a part), or for a program's blob table (four values a
// blob).
constexpr std::size_t kMaxValues = 3 * kMaxResultParts;

template <class T, class M>
struct Field {
  std::string_view name;
  M T::*member;
};

// Each message's fields, in the order they are written. A struct without an entry has no fields.
template <class T>
inline constexpr auto kFields = std::tuple<>{};
template <>
inline constexpr auto kFields<Fork> =
    std::tuple{Field{"visible_devices", &Fork::visible_devices}, Field{"cuda_connections", &Fork::cuda_connections},
               Field{"refuse_multi_stream", &Fork::refuse_multi_stream}, Field{"warm_up", &Fork::warm_up}};
template <>
inline constexpr auto kFields<ZygoteReady> =
    std::tuple{Field{"versions", &ZygoteReady::versions}, Field{"fork_parents", &ZygoteReady::fork_parents}};
template <>
inline constexpr auto kFields<Forked> = std::tuple{Field{"pid", &Forked::pid}};
template <>
inline constexpr auto kFields<Exited> = std::tuple{Field{"pid", &Exited::pid}, Field{"exit_code", &Exited::exit_code},
                                                   Field{"signal", &Exited::signal},
                                                   Field{"out_of_memory", &Exited::out_of_memory}};
template <>
inline constexpr auto kFields<ZygoteFailed> = std::tuple{Field{"message", &ZygoteFailed::message}};
template <>
inline constexpr auto kFields<ForkFailed> = std::tuple{Field{"message", &ForkFailed::message}};
template <>
inline constexpr auto kFields<Blobs> =
    std::tuple{Field{"digests", &Blobs::digests}, Field{"files", &Blobs::files}, Field{"offsets", &Blobs::offsets},
               Field{"sizes", &Blobs::sizes}, Field{"file_count", &Blobs::file_count}};
template <>
inline constexpr auto kFields<RunProgram> =
    std::tuple{Field{"request_id", &RunProgram::request_id}, Field{"output_limit_bytes", &RunProgram::output_limit_bytes},
               Field{"max_returned_bytes", &RunProgram::max_returned_bytes}};
template <>
inline constexpr auto kFields<Progress> = std::tuple{Field{"index", &Progress::index}};
template <>
inline constexpr auto kFields<Lease> = std::tuple{Field{"acquire", &Lease::acquire}};
template <>
inline constexpr auto kFields<InitLease> = std::tuple{Field{"acquire", &InitLease::acquire}};
template <>
inline constexpr auto kFields<Failed> = std::tuple{Field{"message", &Failed::message}};
template <>
inline constexpr auto kFields<ErrorDetail> =
    std::tuple{Field{"kind", &ErrorDetail::kind},           Field{"message", &ErrorDetail::message},
               Field{"index", &ErrorDetail::index},         Field{"op", &ErrorDetail::op},
               Field{"traceback", &ErrorDetail::traceback}, Field{"id", &ErrorDetail::id},
               Field{"cuda_call", &ErrorDetail::cuda_call}, Field{"location", &ErrorDetail::location}};
template <>
inline constexpr auto kFields<RunResult> =
    std::tuple{Field{"continues", &RunResult::continues},
               Field{"stdout_truncated", &RunResult::stdout_truncated},
               Field{"stderr_truncated", &RunResult::stderr_truncated},
               Field{"elapsed_ms", &RunResult::elapsed_ms},
               Field{"part_sizes", &RunResult::part_sizes},
               Field{"error", &RunResult::error},
               Field{"retired", &RunResult::retired},
               Field{"multi_stream", &RunResult::multi_stream},
               Field{"part_blobs", &RunResult::part_blobs}};

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

// -- encoding ---------------------------------------------------------------------------------

template <class T>
Json to_json(const T& value);

template <class T>
Json fields_to_json(const T& message) {
  Json out = Json::object();
  std::apply(
      [&](const auto&... field) {
        [[maybe_unused]] auto put = [&](const auto& f) {
          const auto& value = message.*(f.member);
          if constexpr (IsOptional<std::decay_t<decltype(value)>>::value) {
            if (value) out[std::string(f.name)] = to_json(*value);
          } else {
            out[std::string(f.name)] = to_json(value);
          }
        };
        (put(field), ...);
      },
      kFields<T>);
  return out;
}

template <class T>
Json to_json(const T& value) {
  if constexpr (std::is_same_v<T, ErrorDetail>) return fields_to_json(value);
  else if constexpr (std::is_same_v<T, ErrorKind>) return Json(std::string(to_wire(value)));
  else return Json(value);
}

// -- decoding ---------------------------------------------------------------------------------

using Problem = std::string;  // empty: fine

Problem read(Json& json, std::string& out) {
  if (!json.is_string()) return "must be a string";
  out = std::move(json.get_ref<std::string&>());  // not copied: a text may be most of the frame
  return {};
}
Problem read(Json& json, bool& out) {
  if (!json.is_boolean()) return "must be true or false";
  out = json.get<bool>();
  return {};
}
Problem read(Json& json, std::uint64_t& out) {
  if (!json.is_number_unsigned()) return "must be a non-negative integer";
  out = json.get<std::uint64_t>();
  return {};
}
Problem read(Json& json, std::int64_t& out) {
  if (json.is_number_unsigned()) {
    if (json.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      return "is out of range";
  } else if (!json.is_number_integer()) {
    return "must be an integer";
  }
  out = json.get<std::int64_t>();
  return {};
}
Problem read(Json& json, ErrorKind& out) {
  std::optional<ErrorKind> kind = json.is_string() ? error_kind_from_wire(json.get_ref<const std::string&>()) : std::nullopt;
  if (!kind) return "must be an error kind's name";
  out = *kind;
  return {};
}
Problem read(Json& json, double& out) {
  if (!json.is_number()) return "must be a number";
  out = json.get<double>();
  return {};
}
template <class E>
Problem read(Json& json, std::vector<E>& out) {
  if (!json.is_array()) return "must be an array";
  out.resize(json.size());
  for (std::size_t i = 0; i < json.size(); ++i)
    if (Problem problem = read(json[i], out[i]); !problem.empty()) return "[" + std::to_string(i) + "] " + problem;
  return {};
}
Problem read(Json& json, std::map<std::string, std::string>& out) {
  if (!json.is_object()) return "must be an object";
  for (auto&& [key, value] : json.items()) {
    if (!value.is_string()) return "'" + key + "' must be a string";
    out.emplace(key, std::move(value.get_ref<std::string&>()));
  }
  return {};
}

template <class T>
Problem read_fields(Json& json, T& out, std::size_t other_keys);

Problem read(Json& json, ErrorDetail& out) {
  if (!json.is_object()) return "must be an object";
  return read_fields(json, out, 0);
}

// Reads every field of T from `json`, an object that also holds `other_keys` keys that are
// not T's ("type" at the top level); anything else in it is an unknown field.
template <class T>
Problem read_fields(Json& json, T& out, std::size_t other_keys) {
  Problem problem;
  std::size_t found = 0;
  std::apply(
      [&](const auto&... field) {
        [[maybe_unused]] auto get = [&](const auto& f) {
          if (!problem.empty()) return;
          auto& value = out.*(f.member);
          auto it = json.find(f.name);
          if (it == json.end()) {
            if constexpr (!IsOptional<std::decay_t<decltype(value)>>::value) problem = "'" + std::string(f.name) + "' is missing";
            return;
          }
          ++found;
          Problem field_problem;
          if constexpr (IsOptional<std::decay_t<decltype(value)>>::value) {
            value.emplace();
            field_problem = read(*it, *value);
          } else {
            field_problem = read(*it, value);
          }
          if (!field_problem.empty()) problem = "'" + std::string(f.name) + "' " + field_problem;
        };
        (get(field), ...);
      },
      kFields<T>);
  if (problem.empty() && json.size() != found + other_keys) problem = "has a field it does not define";
  return problem;
}

template <std::size_t I = 0>
kcoral::Result<Message> decode_alternative(std::size_t index, Json& json) {
  if constexpr (I == std::variant_size_v<Message>) {
    return fail(ErrorKind::engine, "unreachable");
  } else {
    if (index != I) return decode_alternative<I + 1>(index, json);
    using T = std::variant_alternative_t<I, Message>;
    T message{};
    if (Problem problem = read_fields(json, message, 1); !problem.empty())
      return fail(ErrorKind::engine, "a '" + std::string(kNames[I]) + "' message: " + problem);
    return Message{std::move(message)};
  }
}

}  // namespace

std::string_view name_of(const Message& message) { return kNames[message.index()]; }

std::size_t descriptor_count(const Message& message) {
  if (const auto* blobs = std::get_if<Blobs>(&message)) return static_cast<std::size_t>(blobs->file_count);
  if (std::holds_alternative<Forked>(message)) return 2;
  if (std::holds_alternative<RunProgram>(message)) return 1;
  if (const auto* result = std::get_if<RunResult>(&message)) {
    for (std::size_t i = 0; i < result->part_sizes.size(); ++i)
      if (!names_blob(*result, i)) return 1;
    return 0;
  }
  return 0;
}

std::string encode(const Message& message) {
  Json json = std::visit([](const auto& m) { return fields_to_json(m); }, message);
  json["type"] = std::string(name_of(message));
  const auto* result = std::get_if<RunResult>(&message);
  if (result != nullptr) {
    json[std::string(kStdoutBytes)] = result->stdout_text.size();
    json[std::string(kStderrBytes)] = result->stderr_text.size();
  }
  // An error's text need not be UTF-8: replace what is not, rather than fail the send.
  std::string text = json.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (result != nullptr)
    text.append("\n").append(result->results).append(result->stdout_text).append(result->stderr_text);
  return text;
}

namespace {

// The message of a frame's object, `text` up to its first newline; a result's values and
// output, what follows, are set by the caller, from the sizes of its output (`output`).
kcoral::Result<Message> decode_object(std::string_view text, std::size_t descriptors, bool has_values,
                                      std::pair<std::uint64_t, std::uint64_t>& output) {
  // A message is an object of fields, arrays and one object of fields (an error) at most;
  // what is deeper or more numerous is dropped as it is parsed, so that no frame costs the
  // receiver more than its text plus a bounded tree, and then refused.
  bool too_big = false;
  std::size_t values = 0;
  auto bounded = [&](int depth, Json::parse_event_t event, Json&) {
    bool opens = event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
    bool counted = event == Json::parse_event_t::value || event == Json::parse_event_t::key;
    if ((opens && depth > 1) || (counted && ++values > kMaxValues)) too_big = true;
    return !too_big;
  };
  Json json = Json::parse(text, bounded, /*allow_exceptions=*/false);
  if (too_big)
    return fail(ErrorKind::engine, "a channel message nested deeper than its fields or with more than " +
                                       std::to_string(kMaxValues) + " values");
  if (!json.is_object()) return fail(ErrorKind::engine, "a channel message is not a JSON object");
  auto type = json.find("type");
  if (type == json.end() || !type->is_string()) return fail(ErrorKind::engine, "a channel message has no type");
  const std::string& name = type->get_ref<const std::string&>();
  auto known = std::find(kNames.begin(), kNames.end(), name);
  if (known == kNames.end()) return fail(ErrorKind::engine, "unknown channel message type '" + name.substr(0, 64) + "'");
  if (name == "result") {  // its output's sizes, for the caller
    for (auto [key, size] : {std::pair{kStdoutBytes, &output.first}, std::pair{kStderrBytes, &output.second}}) {
      auto field = json.find(std::string(key));
      if (field == json.end() || !field->is_number_unsigned())
        return fail(ErrorKind::engine, "a 'result' message: '" + std::string(key) + "' must be a non-negative integer");
      *size = field->get<std::uint64_t>();
      json.erase(field);
    }
  }
  auto message = decode_alternative(static_cast<std::size_t>(known - kNames.begin()), json);
  if (message && std::holds_alternative<RunResult>(*message) != has_values)
    return fail(ErrorKind::engine, has_values ? "a '" + name + "' message is followed by text"
                                              : "a 'result' message without its values after it");
  if (message && descriptor_count(*message) != descriptors)
    return fail(ErrorKind::engine, "a '" + name + "' message came with " + std::to_string(descriptors) +
                                       " descriptors instead of " + std::to_string(descriptor_count(*message)));
  return message;
}

}  // namespace

kcoral::Result<Message> decode(std::string_view text, std::size_t descriptors) {
  return decode_in_place(std::string(text), descriptors);
}

kcoral::Result<Message> decode_in_place(std::string&& text, std::size_t descriptors) {
  std::size_t end = text.find('\n');
  std::pair<std::uint64_t, std::uint64_t> output{0, 0};
  auto message = decode_object(std::string_view(text).substr(0, end), descriptors, end != std::string::npos, output);
  if (message)
    if (auto* result = std::get_if<RunResult>(&*message)) {
      const std::size_t tail = text.size() - end - 1;  // the values, then stdout, then stderr
      if (output.first > tail || output.second > tail - output.first)
        return fail(ErrorKind::engine, "a 'result' message: its output is longer than what follows it");
      result->stderr_text = text.substr(text.size() - output.second);
      result->stdout_text = text.substr(text.size() - output.second - output.first, output.first);
      text.resize(text.size() - output.first - output.second);
      text.erase(0, end + 1);  // in place: no second buffer of the values' size
      // What the object and the output took (tens of megabytes, it may be) is left over in
      // the buffer: kept no larger than the values, or 1 MiB (a copy of them costs less).
      if (text.capacity() - text.size() > std::max(text.size(), std::size_t{1} << 20)) text.shrink_to_fit();
      result->results = std::move(text);
    }
  return message;
}

Status send(const Channel& channel, const Message& message, std::span<const int> fds) {
  if (fds.size() != descriptor_count(message))
    return fail(ErrorKind::engine, "a '" + std::string(name_of(message)) + "' message must carry " +
                                       std::to_string(descriptor_count(message)) + " descriptors");
  return channel.send(encode(message), std::vector<int>(fds.begin(), fds.end()));
}

kcoral::Result<std::optional<Received>> receive(const Channel& channel) {
  auto frame = channel.receive();
  if (!frame) return std::unexpected(frame.error());
  if (!*frame) return std::optional<Received>();
  auto message = decode_in_place(std::move((*frame)->json), (*frame)->fds.size());
  if (!message) return std::unexpected(message.error());
  return std::optional<Received>(Received{std::move(*message), std::move((*frame)->fds)});
}

}  // namespace kcoral::messages
