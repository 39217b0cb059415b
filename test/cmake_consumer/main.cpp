// Runs one program in-process through the installed library, with kcoral._native built in,
// and prints its results.
#include <cstdio>

#include "kcoral/executor.hpp"
#include "kcoral/native_module.hpp"
#include "kcoral/program_builder.hpp"

int main() {
  kcoral::ProgramBuilder builder;
  // The sum only where kcoral._native is built into this program.
  auto module = builder.upload_module(
      "module", "import sys\n\ndef add(a, b):\n    return a + b + ('kcoral._native' not in sys.builtin_module_names)\n");
  auto add = builder.get_function("add", module, "add");
  builder.return_value("sum", builder.run("sum", add, {kcoral::json_literal("40"), kcoral::json_literal("2")}));
  auto built = builder.build();
  if (!kcoral::register_native_module()) return 2;
  auto executor = kcoral::Executor::create({});
  if (!built || !executor) return 2;
  kcoral::NoGpuLease lease;
  kcoral::ProgramResult result = (*executor)->run(built->program, built->blobs, lease, {});
  std::printf("%s %s\n", result.completed() ? "COMPLETED" : "FAILED", result.results_json.c_str());
  if (result.error) std::fprintf(stderr, "%s\n%s\n", result.error->message.c_str(), result.error->traceback.c_str());
  return result.completed() ? 0 : 1;
}
