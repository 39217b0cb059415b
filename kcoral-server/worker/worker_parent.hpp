// The worker parent's entry: kcoral-server starts `PYTHON -c BOOTSTRAP ARGS...`
// (front/zygote_handle.cpp), whose bootstrap loads the native module kcoral._native and
// calls its worker_main(ARGS), which runs this. The workers so run under the interpreter
// they are started with, whichever it is (a shared or a static libpython), and nothing
// of it is named at build time.
#pragma once

#include <string>
#include <vector>

namespace kcoral {

// Parses `arguments` (the front's flags, program name left out), prepares the sandbox,
// imports the preloads, and serves fork requests until the front goes (zygote.hpp). The
// calling thread must not hold the GIL, and the process must have no other thread yet (a
// zygote that is not root enters a user namespace of its own). Returns the exit code.
[[nodiscard]] int run_worker_parent(const std::vector<std::string>& arguments);

}  // namespace kcoral
