// Runs one program in-process through the installed library and prints its results.
#include <cstdio>

#include "kcoral/executor.hpp"
#include "kcoral/program_builder.hpp"

int main() {
  kcoral::ProgramBuilder builder;
  auto module = builder.upload_module("module", "def add(a, b):\n    return a + b\n");
  auto add = builder.get_function("add", module, "add");
  builder.return_value("sum", builder.run("sum", add, {kcoral::json_literal("40"), kcoral::json_literal("2")}));
  auto built = builder.build();
  auto executor = kcoral::Executor::create({});
  if (!built || !executor) return 2;
  kcoral::NoGpuLease lease;
  kcoral::ProgramResult result = (*executor)->run(built->program, built->blobs, lease, {});
  std::printf("%s %s\n", result.completed() ? "COMPLETED" : "FAILED", result.results_json.c_str());
  return result.completed() ? 0 : 1;
}
