// The Python frames of the calling thread, read from native code running under them (a
// CUDA callback, say), with or without the GIL held. Without <Python.h>.
#pragma once

#include <string>
#include <vector>

namespace kcoral::cpython {

struct Frame {
  std::string file;      // co_filename
  std::string function;  // co_name
  int line = 0;
};

// Outermost first; empty when the interpreter is not running or this thread is in no
// Python code.
[[nodiscard]] std::vector<Frame> current_frames();

}  // namespace kcoral::cpython
