// EventLog: one JSON line per POST /execute, under --log-dir, rotated by size.
//
// One EventLog is one file, events.jsonl unless named otherwise; past --log-max-bytes it
// becomes events.jsonl.1 (the older ones move up to .2, .3, ...; past --log-files the
// oldest is removed) and a new one starts. With --token-file the server keeps a second
// one, anonymous.jsonl, for requests that showed no accepted token: rotated on its own, so
// that anyone who can reach the port cannot push the clients' lines out of events.jsonl.
// Each line is written with one write(2) on an O_APPEND descriptor, so lines never
// interleave and a crash loses no line already answered. Thread-safe.
//
//   auto log = EventLog::open({"/var/log/kcoral", 64 << 20, 5});
//   (*log)->write(R"({"request_id":"..."})");
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "kcoral/error.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

// Now, as RFC 3339 in UTC with microseconds ("2026-12-03T08:30:00.123456Z").
[[nodiscard]] std::string now_rfc3339();

class EventLog {
 public:
  struct Settings {
    std::string directory;
    std::uint64_t max_file_bytes = 64ull << 20;
    std::size_t files = 5;  // kept in all, the current one included
    std::string name = "events.jsonl";
  };

  [[nodiscard]] static Result<std::unique_ptr<EventLog>> open(Settings settings);
  // Appends `line` (one JSON document, without its newline).
  void write(std::string_view line);
  [[nodiscard]] std::string path() const { return settings_.directory + "/" + settings_.name; }

 private:
  explicit EventLog(Settings settings) : settings_(std::move(settings)) {}
  [[nodiscard]] Status open_current();
  void rotate();

  const Settings settings_;
  std::mutex mutex_;
  UniqueFd file_;
  std::uint64_t size_ = 0;
};

}  // namespace kcoral
