// Error kinds and the values that carry them across module boundaries.
//
// One table (error.cpp) maps every kind to its wire string and, for errors outside a
// program, to its HTTP status. Program failures (`parse` … `engine`) travel inside a
// 200 FAILED response; request failures (`request_too_large`, `busy`, `timeout`,
// `response_too_large`, and `parse`/`engine` outside a program) are HTTP errors, as are
// the routing errors `not_found` and `method_not_allowed` and the refused token's
// `unauthorized`.
#pragma once

#include <cerrno>
#include <cstring>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace kcoral {

// Values match the wire strings of docs/protocol.md.
enum class ErrorKind {
  parse,
  compile,
  runtime,
  gpu_access,
  correctness,
  serialization,
  unavailable,
  engine,
  request_too_large,
  busy,
  timeout,
  response_too_large,
  not_found,
  method_not_allowed,
  unauthorized,
};

inline constexpr ErrorKind kAllErrorKinds[] = {
    ErrorKind::parse,          ErrorKind::compile,       ErrorKind::runtime,
    ErrorKind::gpu_access,     ErrorKind::correctness,   ErrorKind::serialization,
    ErrorKind::unavailable,    ErrorKind::engine,        ErrorKind::request_too_large,
    ErrorKind::busy,           ErrorKind::timeout,       ErrorKind::response_too_large,
    ErrorKind::not_found,      ErrorKind::method_not_allowed, ErrorKind::unauthorized,
};

[[nodiscard]] std::string_view to_wire(ErrorKind kind);
[[nodiscard]] std::optional<ErrorKind> error_kind_from_wire(std::string_view text);
// The HTTP status of a request that fails with this kind outside a program.
[[nodiscard]] int http_status(ErrorKind kind);
// Whether the kind can describe a failed instruction in a FAILED program.
[[nodiscard]] bool is_program_kind(ErrorKind kind);

// An error as a value: what went wrong and a message a person can act on.
struct Error {
  ErrorKind kind = ErrorKind::engine;
  std::string message;
};

template <class T>
using Result = std::expected<T, Error>;
using Status = std::expected<void, Error>;

[[nodiscard]] inline std::unexpected<Error> fail(ErrorKind kind, std::string message) {
  return std::unexpected(Error{kind, std::move(message)});
}

// A failed system call: `what`, then errno's text ("mounting /dev: Permission denied").
[[nodiscard]] inline std::unexpected<Error> system_error(std::string_view what) {
  return fail(ErrorKind::engine, std::string(what) + ": " + std::strerror(errno));
}

// Evaluates `expression` (a Status or a Result) and, when it failed, returns its error from
// the enclosing function (which returns a Status or a Result):
//   KCORAL_TRY(make_directories(root + "/dev"));
#define KCORAL_TRY(expression)                                                    \
  do {                                                                            \
    if (auto kcoral_tried = (expression); !kcoral_tried)                          \
      return std::unexpected(std::move(kcoral_tried).error());                    \
  } while (false)

}  // namespace kcoral
