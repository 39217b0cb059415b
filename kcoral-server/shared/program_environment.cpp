// ProgramEnvironment: the list and its NAME=VALUE parser.
#include "program_environment.hpp"

#include <algorithm>
#include <cctype>

namespace kcoral {
namespace {

void put(EnvironmentVariables& variables, const std::string& name, const std::string& value) {
  auto found = std::find_if(variables.begin(), variables.end(), [&](const auto& v) { return v.first == name; });
  if (found != variables.end()) found->second = value;
  else variables.emplace_back(name, value);
}

}  // namespace

EnvironmentVariables program_environment(const ProgramEnvironmentSpec& spec) {
  std::string system_path = spec.system_path;
  for (const auto& [name, value] : spec.operator_variables)
    if (name == "PATH") system_path = value;
  std::string path = spec.interpreter_bin.empty() ? system_path : spec.interpreter_bin + ":" + system_path;
  EnvironmentVariables variables{{"PATH", path},          {"HOME", spec.home},   {"TMPDIR", spec.tmpdir},
                                 {"LANG", "C.UTF-8"},     {"USER", "kcoral"},    {"LOGNAME", "kcoral"},
                                 {kGlibcTunables, kLargeAllocationsInHugePages}};
  if (!spec.visible_devices.empty()) put(variables, "CUDA_VISIBLE_DEVICES", spec.visible_devices);
  if (spec.cuda_connections > 0) put(variables, "CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(spec.cuda_connections));
  if (!spec.compile_cache.empty()) {
    const std::string& cache = spec.compile_cache;
    for (const auto& [name, directory] : {std::pair{"TRITON_CACHE_DIR", "triton"}, {"TVM_FFI_CACHE_DIR", "tvm-ffi"},
                                          {"CUTE_DSL_CACHE_DIR", "cutedsl"}, {"CUDA_CACHE_PATH", "nv"},
                                          {"TORCH_EXTENSIONS_DIR", "torch_extensions"},
                                          {"TORCHINDUCTOR_CACHE_DIR", "torchinductor"}})
      put(variables, name, cache + "/" + directory);
    // The driver's own bound, which it keeps by evicting its oldest entries itself.
    if (spec.compile_cache_bytes > 0)
      put(variables, "CUDA_CACHE_MAXSIZE", std::to_string(std::min<std::uint64_t>(spec.compile_cache_bytes / 4, std::uint64_t{4} << 30)));
    put(variables, "KCORAL_COMPILE_CACHE", cache);
  }
  for (const auto& [name, value] : spec.operator_variables)
    if (name != "PATH") put(variables, name, value);
  return variables;
}

Result<std::pair<std::string, std::string>> parse_environment_assignment(std::string_view text) {
  std::size_t equals = text.find('=');
  std::string_view name = text.substr(0, equals);
  bool valid = equals != std::string_view::npos && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0])) == 0 &&
               std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; });
  if (!valid)
    return fail(ErrorKind::parse, "expected NAME=VALUE with a NAME of letters, digits and underscores, not '" +
                                      std::string(text.substr(0, 64)) + "'");
  return std::pair{std::string(name), std::string(text.substr(equals + 1))};
}

}  // namespace kcoral
