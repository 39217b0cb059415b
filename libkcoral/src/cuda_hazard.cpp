#include "cuda_hazard.hpp"

#include <filesystem>
#include <fstream>

namespace kcoral {

namespace {

constexpr std::string_view kNvidiaDevices = "/dev/nvidia";

}  // namespace

std::optional<std::string> cuda_hazard() {
  std::error_code ignored;
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd", ignored)) {
    fs::path target = fs::read_symlink(entry.path(), ignored);
    if (target.native().starts_with(kNvidiaDevices)) return "opened " + target.native();
  }
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (auto at = line.find(kNvidiaDevices); at != std::string::npos) return "mapped " + line.substr(at);
  }
  return std::nullopt;
}

}  // namespace kcoral
