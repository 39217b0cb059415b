// Program::parse_memory_bound against the memory Program::parse really takes: for each shape
// of program that costs the parser most per byte of text, a child process parses it and
// reads its own peak resident size (VmHWM, reset first through /proc/self/clear_refs); the
// bound must be at least that growth. Program::memory_bytes must be at least what the
// parsed program keeps. A server holds the bound in its in-flight budget while it parses.
#include <doctest/doctest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>

#include "kcoral/program.hpp"
#include "libkcoral/test_support.hpp"

using kcoral::test::kFunction;
using kcoral::test::kModule;
using kcoral::test::program_of;

namespace {

constexpr std::size_t kTextBytes = 8u << 20;

std::uint64_t status_kib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with(field)) return std::stoull(line.substr(line.find(':') + 1));
  return 0;
}

struct Measured {
  std::uint64_t parse_peak = 0;  // the resident size's growth while parsing
  std::uint64_t kept = 0;        // the resident size's growth the parsed program keeps
  std::uint64_t memory_bytes = 0;
  bool parsed = false;
};

// Parses `json` in a child whose resident memory is measured around the parse.
Measured measure(const std::string& json) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::malloc_trim(0);
    { std::ofstream("/proc/self/clear_refs") << "5"; }  // VmHWM back to VmRSS
    Measured out;
    std::uint64_t before = status_kib("VmRSS:");
    {
      auto program = kcoral::Program::parse(json);
      out.parse_peak = (status_kib("VmHWM:") - before) * 1024;
      ::malloc_trim(0);  // what the parse freed back to the system, as far as it goes
      out.kept = (status_kib("VmRSS:") - before) * 1024;
      out.parsed = program.has_value();
      if (program) out.memory_bytes = program->memory_bytes();
    }
    ssize_t written = ::write(pipe_fds[1], &out, sizeof out);
    ::_exit(written == sizeof out ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  Measured out;
  ssize_t got = ::read(pipe_fds[0], &out, sizeof out);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(got == static_cast<ssize_t>(sizeof out));
  REQUIRE(WIFEXITED(status));
  return out;
}

// `item` repeated, separated by commas, to about kTextBytes.
std::string repeated(const std::string& item) {
  std::string out;
  out.reserve(kTextBytes + item.size() + 1);
  while (out.size() < kTextBytes) {
    if (!out.empty()) out += ',';
    out += item;
  }
  return out;
}

std::string run_with_args(const std::string& args) {
  return program_of(std::string(kModule) + "," + std::string(kFunction) +
                    R"(,{"op":"run","id":"r","fn":{"$ref":"f"},"args":[)" + args + "]}");
}

std::string numbered_keys() {
  std::string out = "{";
  for (std::size_t i = 0; out.size() < kTextBytes; ++i) {
    if (i > 0) out += ',';
    out += "\"" + std::to_string(i) + "\":0";
  }
  return out + "}";
}

std::string runs(std::size_t count) {
  std::string out = std::string(kModule) + "," + std::string(kFunction);
  for (std::size_t i = 0; i < count; ++i)
    out += R"(,{"op":"run","id":"a-run-id-of-24-chars-)" + std::to_string(i) +
           R"(","fn":{"$ref":"f"},"args":["an argument of 24 chars"]})";
  return program_of(out);
}

}  // namespace

TEST_SUITE("program_parse_memory") {

TEST_CASE("the bound covers what parsing takes and memory_bytes what the program keeps") {
  const std::pair<std::string, std::string> shapes[] = {
      {"a list of zeros", run_with_args("[" + repeated("0") + "]")},
      {"zeros as separate arguments", run_with_args(repeated("0"))},
      {"strings of 16 bytes as separate arguments", run_with_args(repeated(R"("0123456789abcdef")"))},
      {"a list of 1e14, which minifies to 17 bytes", run_with_args("[" + repeated("1e14") + "]")},
      {"1e14 as separate arguments", run_with_args(repeated("1e14"))},
      {"empty lists as separate arguments", run_with_args(repeated("[]"))},
      {"an object of numbered keys", run_with_args(numbered_keys())},
      {"lists nested 60 deep", run_with_args(repeated(std::string(58, '[') + std::string(58, ']')))},
      {"100,000 instructions", runs(99998)},
      {"a module's source", program_of(R"({"op":"upload","id":"m","kind":"module","source":")" +
                                       std::string(kTextBytes, 'x') + "\"}")},
  };
  for (const auto& [name, json] : shapes) {
    CAPTURE(name);
    Measured measured = measure(json);
    REQUIRE(measured.parsed);
    std::uint64_t bound = kcoral::Program::parse_memory_bound(json);
    MESSAGE(name << ": " << json.size() << " bytes of text, parse peak " << measured.parse_peak << " (x"
                 << measured.parse_peak / json.size() << "), bound " << bound << " (x" << bound / json.size()
                 << "), kept " << measured.kept << ", memory_bytes " << measured.memory_bytes);
    CHECK(measured.parse_peak <= bound);
    // What the parse freed among what the program keeps stays resident too (the heap's
    // fragments), beside the program itself.
    CHECK(measured.kept <= measured.memory_bytes * 3 / 2 + (1u << 20));
  }
}

TEST_CASE("the bound counts tokens simdjson indexes in text it refuses, and stops at an unclosed string") {
  // Stage 1 indexes every word outside strings before stage 2 refuses the first.
  CHECK(kcoral::Program::parse_memory_bound(repeated("a b")) > kcoral::Program::parse_memory_bound(repeated("aaa")));
  CHECK(kcoral::Program::parse_memory_bound("\"a\\") == kcoral::Program::parse_memory_bound("\"ab"));
}

}  // TEST_SUITE
