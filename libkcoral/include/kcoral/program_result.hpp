// ProgramResult: what running one Program produced.
//
// `results_json` is the JSON object of returned values as the typed tree of docs/protocol.md;
// its binary nodes name the parts `return:0`, `return:1`, … which are `parts`, in order.
// A failed program keeps the returns made before the failure.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "kcoral/blob.hpp"
#include "kcoral/error.hpp"

namespace kcoral {

// Extra fields of a `gpu_access` failure.
struct GpuAccessDetail {
  std::string cuda_call;
  std::string location;
  std::optional<std::string> interfered_request_id;
};

// An error's message is kept to its first 64 KiB (saying how much was cut), its traceback
// to its last 8192 bytes: what a person reads, not the megabytes an exception may carry.
inline constexpr std::size_t kErrorMessageBytes = std::size_t{64} << 10;
inline constexpr std::size_t kCutNoteBytes = 64;  // "... (N more bytes cut)" at most
inline constexpr std::size_t kTracebackBytes = 8192;
[[nodiscard]] std::string cut_error_message(std::string message);
[[nodiscard]] std::string cut_traceback(std::string traceback);

struct InstructionError {
  ErrorKind kind = ErrorKind::engine;
  std::string message;
  std::size_t instruction_index = 0;
  std::string instruction_op;
  std::optional<std::string> instruction_id;
  std::string traceback;  // the last 8192 bytes
  std::optional<GpuAccessDetail> gpu_access;
};

struct CapturedOutput {
  std::string text;
  bool truncated = false;
};

struct ProgramResult {
  std::string results_json = "{}";
  std::vector<Blob> parts;
  std::optional<InstructionError> error;
  CapturedOutput stdout_output;
  CapturedOutput stderr_output;
  double elapsed_ms = 0;
  double lease_wait_ms = 0;
  double lease_held_ms = 0;
  // The device failed in a way that outlives the program (a sticky CUDA error): the
  // process that ran it must not run another.
  bool device_lost = false;

  [[nodiscard]] bool completed() const { return !error.has_value(); }
};

}  // namespace kcoral
