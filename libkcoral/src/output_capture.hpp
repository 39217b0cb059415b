// OutputCapture: a program's stdout and stderr, taken at the file-descriptor level.
//
// While active, descriptors 1 and 2 of this process point into pipes that a thread
// drains, so output of native code and of subprocesses is caught too. Only the first
// `limit_bytes` of each stream are kept (the rest is read and counted as truncation), so
// a program that prints without end cannot exhaust memory. A limit of 0 captures nothing
// and leaves the descriptors alone. One capture per process at a time.
//
//   auto capture = OutputCapture::start(1 << 20);
//   run_program();
//   auto [out, err] = (*capture)->finish();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

struct RawCapture {
  std::string bytes;
  bool truncated = false;
};

class OutputCapture {
 public:
  [[nodiscard]] static Result<std::unique_ptr<OutputCapture>> start(std::uint64_t limit_bytes);
  OutputCapture(const OutputCapture&) = delete;
  OutputCapture& operator=(const OutputCapture&) = delete;
  ~OutputCapture();

  // Puts descriptors 1 and 2 back and returns what each stream wrote. Data still
  // buffered inside the process (stdio, Python's sys.stdout) must be flushed before.
  std::pair<RawCapture, RawCapture> finish();

 private:
  explicit OutputCapture(std::uint64_t limit_bytes) : limit_bytes_(limit_bytes) {}
  void drain();

  std::uint64_t limit_bytes_;
  bool active_ = false;
  UniqueFd saved_[2];
  UniqueFd read_[2];
  UniqueFd stop_;  // eventfd: tells the drain thread to empty the pipes and stop
  RawCapture captured_[2];
  std::thread thread_;
};

}  // namespace kcoral
