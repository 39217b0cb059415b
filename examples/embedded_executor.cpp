// Builds a program in C++, runs it in this process with an Executor, prints the result.
//
//   build/examples/kcoral-embedded-example
//
// No server and no sockets: the executor embeds CPython, so this is how a C++ test
// harness runs KCoral programs.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kcoral/executor.hpp"
#include "kcoral/native_module.hpp"
#include "kcoral/program_builder.hpp"

namespace {

constexpr const char* kSource = R"(
import numpy as np

def scale(values, factor):
    print(f"scaling {values.size} values by {factor}")
    return values * factor

def summary(values):
    return {"sum": float(values.sum()), "max": float(values.max())}
)";

}  // namespace

int main() {
  kcoral::ProgramBuilder builder;
  auto module = builder.upload_module("module", kSource);
  auto scale = builder.get_function("scale", module, "scale");
  auto summary = builder.get_function("summary", module, "summary");
  std::vector<float> values(8);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  auto input = builder.upload_tensor(
      "values", std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * 4),
      kcoral::Dtype::float32, {8});
  auto scaled = builder.run("scaled", scale, {input, kcoral::json_literal("2.5")});
  auto report = builder.run("report", summary, {scaled});
  builder.return_value("report", report);
  builder.return_value("scaled", scaled);
  auto built = builder.build();
  if (!built) {
    std::fprintf(stderr, "invalid program: %s\n", built.error().message.c_str());
    return 1;
  }

  // kcoral.builtins, should the program import it, then runs on this process's libkcoral.
  if (auto registered = kcoral::register_native_module(); !registered) {
    std::fprintf(stderr, "%s\n", registered.error().message.c_str());
    return 1;
  }
  auto executor = kcoral::Executor::create({});
  if (!executor) {
    std::fprintf(stderr, "no executor: %s\n", executor.error().message.c_str());
    return 1;
  }
  kcoral::NoGpuLease lease;
  kcoral::ProgramResult result = (*executor)->run(built->program, built->blobs, lease, {});

  std::printf("status:  %s\n", result.completed() ? "COMPLETED" : "FAILED");
  std::printf("results: %s\n", result.results_json.c_str());
  std::printf("parts:   %zu (return:0 holds %zu bytes)\n", result.parts.size(),
              result.parts.empty() ? std::size_t{0} : result.parts[0].size());
  std::printf("stdout:  %s", result.stdout_output.text.c_str());
  if (result.error) {
    std::printf("error:   %s: %s\n%s\n", std::string(kcoral::to_wire(result.error->kind)).c_str(),
                result.error->message.c_str(), result.error->traceback.c_str());
  }
  return result.completed() ? 0 : 1;
}
