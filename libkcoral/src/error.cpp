// The one table of error kinds: wire string, HTTP status, and whether a program may fail
// with it.
#include "kcoral/error.hpp"

#include <array>

namespace kcoral {
namespace {

struct KindRow {
  ErrorKind kind;
  std::string_view wire;
  int http_status;
  bool program_kind;
};

// Program kinds carry the status a request with that kind gets outside a program: a
// malformed program is 400, anything else the server could not attribute is 500.
constexpr std::array<KindRow, 15> kKinds{{
    {ErrorKind::parse, "parse", 400, true},
    {ErrorKind::compile, "compile", 500, true},
    {ErrorKind::runtime, "runtime", 500, true},
    {ErrorKind::gpu_access, "gpu_access", 500, true},
    {ErrorKind::correctness, "correctness", 500, true},
    {ErrorKind::serialization, "serialization", 500, true},
    {ErrorKind::unavailable, "unavailable", 500, true},
    {ErrorKind::engine, "engine", 500, true},
    {ErrorKind::request_too_large, "request_too_large", 413, false},
    {ErrorKind::busy, "busy", 503, false},
    {ErrorKind::timeout, "timeout", 504, false},
    {ErrorKind::response_too_large, "response_too_large", 500, false},
    {ErrorKind::not_found, "not_found", 404, false},
    {ErrorKind::method_not_allowed, "method_not_allowed", 405, false},
    {ErrorKind::unauthorized, "unauthorized", 401, false},
}};

const KindRow& row(ErrorKind kind) {
  for (const KindRow& r : kKinds) {
    if (r.kind == kind) return r;
  }
  return kKinds[7];  // engine: unreachable for a valid enum value
}

}  // namespace

std::string_view to_wire(ErrorKind kind) { return row(kind).wire; }

std::optional<ErrorKind> error_kind_from_wire(std::string_view text) {
  for (const KindRow& r : kKinds) {
    if (r.wire == text) return r.kind;
  }
  return std::nullopt;
}

int http_status(ErrorKind kind) { return row(kind).http_status; }

bool is_program_kind(ErrorKind kind) { return row(kind).program_kind; }

}  // namespace kcoral
