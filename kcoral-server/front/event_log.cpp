// EventLog: appending, and rotation by size.
#include "event_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

namespace kcoral {

std::string now_rfc3339() {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[64];
  std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%06lldZ", static_cast<long long>(micros));
  return text;
}

Result<std::unique_ptr<EventLog>> EventLog::open(Settings settings) {
  std::error_code ec;
  std::filesystem::create_directories(settings.directory, ec);
  if (ec) return fail(ErrorKind::engine, "cannot make the log directory " + settings.directory + ": " + ec.message());
  std::unique_ptr<EventLog> log(new EventLog(std::move(settings)));
  KCORAL_TRY(log->open_current());
  return log;
}

Status EventLog::open_current() {
  file_ = UniqueFd(::open(path().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640));
  if (!file_) return fail(ErrorKind::engine, "cannot open " + path() + ": " + std::strerror(errno));
  struct stat info {};
  size_ = ::fstat(file_.get(), &info) == 0 ? static_cast<std::uint64_t>(info.st_size) : 0;
  return {};
}

void EventLog::write(std::string_view line) {
  std::string text(line);
  text += '\n';
  std::lock_guard lock(mutex_);
  if (size_ > 0 && size_ + text.size() > settings_.max_file_bytes) rotate();
  if (!file_) return;
  ssize_t written = ::write(file_.get(), text.data(), text.size());
  if (written > 0) size_ += static_cast<std::uint64_t>(written);
}

void EventLog::rotate() {
  // NAME.(N-1) is the oldest kept; .N would be one too many.
  std::string base = path();
  std::error_code ec;
  std::filesystem::remove(base + "." + std::to_string(settings_.files - 1), ec);
  for (std::size_t i = settings_.files - 1; i-- > 1;)
    std::filesystem::rename(base + "." + std::to_string(i), base + "." + std::to_string(i + 1), ec);
  if (settings_.files > 1) std::filesystem::rename(base, base + ".1", ec);
  else std::filesystem::remove(base, ec);
  if (auto status = open_current(); !status)
    std::fprintf(stderr, "kcoral-server: event log: %s\n", status.error().message.c_str());
}

}  // namespace kcoral
