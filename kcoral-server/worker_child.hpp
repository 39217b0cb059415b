// A worker child: runs one program sent by the front, then is done.
#pragma once

#include <string>

#include "channel.hpp"
#include "kcoral/executor.hpp"

namespace kcoral {

// Warms up, announces readiness, receives blobs and one program over `channel`, runs it with working
// directories under `work_root`, kills what it left running and sends the result.
// Returns the process exit code.
[[nodiscard]] int serve_one_program(Executor& executor, Channel channel, const std::string& work_root);

}  // namespace kcoral
