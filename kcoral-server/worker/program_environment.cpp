// ProgramEnvironment: the list, its NAME=VALUE parser, and /proc/self/environ through
// prctl(PR_SET_MM_MAP), which replaces the memory map's description as a whole: every
// other field is given back as /proc/self/stat shows it.
#include "program_environment.hpp"

#include <fcntl.h>
#include <linux/prctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>

namespace kcoral {
namespace {

void put(EnvironmentVariables& variables, const std::string& name, const std::string& value) {
  auto found = std::find_if(variables.begin(), variables.end(), [&](const auto& v) { return v.first == name; });
  if (found != variables.end()) found->second = value;
  else variables.emplace_back(name, value);
}

// Fields 26 to 51 of /proc/self/stat (proc(5)), read with plain read(2).
std::optional<std::vector<unsigned long>> stat_fields() {
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[4096];
  ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  text[n] = '\0';
  const char* cursor = std::strrchr(text, ')');  // the command name may hold anything
  if (cursor == nullptr) return std::nullopt;
  cursor += 2;
  std::vector<unsigned long> fields(3, 0);  // fields 1 and 2 are before the cursor
  while (*cursor != '\0' && fields.size() <= 52) {
    char* end = nullptr;
    fields.push_back(std::strtoul(cursor, &end, 10));
    if (end == cursor) ++cursor;  // the state letter (field 3)
    else cursor = end;
    while (*cursor == ' ') ++cursor;
  }
  if (fields.size() <= 51) return std::nullopt;
  return fields;
}

}  // namespace

EnvironmentVariables program_environment(const ProgramEnvironmentSpec& spec) {
  std::string system_path = spec.system_path;
  for (const auto& [name, value] : spec.operator_variables)
    if (name == "PATH") system_path = value;
  std::string path = spec.interpreter_bin.empty() ? system_path : spec.interpreter_bin + ":" + system_path;
  EnvironmentVariables variables{{"PATH", path},          {"HOME", spec.home},   {"TMPDIR", spec.tmpdir},
                                 {"LANG", "C.UTF-8"},     {"USER", "kcoral"},    {"LOGNAME", "kcoral"}};
  if (!spec.visible_devices.empty()) put(variables, "CUDA_VISIBLE_DEVICES", spec.visible_devices);
  if (spec.cuda_connections > 0) put(variables, "CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(spec.cuda_connections));
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

Status show_environment(const EnvironmentVariables& variables) {
  std::string block;
  for (const auto& [name, value] : variables) {
    block += name + "=" + value;
    block.push_back('\0');
  }
  auto fields = stat_fields();
  if (!fields) return fail(ErrorKind::engine, "cannot read /proc/self/stat");
  const auto& f = *fields;
  auto* old_start = reinterpret_cast<char*>(f[50]);
  auto* old_end = reinterpret_cast<char*>(f[51]);

  // A block of its own, never freed: the kernel reads it whenever /proc/self/environ is.
  std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::size_t length = (block.size() + page) / page * page;
  void* memory = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory != MAP_FAILED) {
    std::memcpy(memory, block.data(), block.size());
    prctl_mm_map map{};
    map.start_code = f[26];
    map.end_code = f[27];
    map.start_stack = f[28];
    map.start_data = f[45];
    map.end_data = f[46];
    map.start_brk = f[47];
    map.brk = static_cast<unsigned long>(::syscall(SYS_brk, 0));
    map.arg_start = f[48];
    map.arg_end = f[49];
    map.env_start = reinterpret_cast<unsigned long>(memory);
    map.env_end = map.env_start + block.size();
    map.exe_fd = static_cast<__u32>(-1);
    if (::prctl(PR_SET_MM, PR_SET_MM_MAP, &map, sizeof map, 0) == 0) return {};
    ::munmap(memory, length);
  }
  int error = errno;

  // In place: whole variables while they fit, zeros after.
  if (old_start == nullptr || old_end <= old_start) return fail(ErrorKind::engine, "no environment block to replace");
  std::size_t room = static_cast<std::size_t>(old_end - old_start);
  std::size_t used = 0;
  std::size_t shown = 0;
  for (const auto& [name, value] : variables) {
    std::size_t size = name.size() + 1 + value.size() + 1;
    if (used + size > room) break;
    std::memcpy(old_start + used, (name + "=" + value).c_str(), size);
    used += size;
    ++shown;
  }
  std::memset(old_start + used, 0, room - used);
  if (shown == variables.size()) return {};
  return fail(ErrorKind::engine, "/proc/self/environ shows " + std::to_string(shown) + " of " +
                                     std::to_string(variables.size()) + " variables (PR_SET_MM_MAP: " +
                                     std::strerror(error) + ")");
}

}  // namespace kcoral
