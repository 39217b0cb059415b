// What the front's tests with processes share: running the io_context until something
// has happened, and reading a stand-in worker parent's log.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kcoral::test {

// Runs `io` in 5 ms slices until `done()` or until `within` has passed; whether done.
template <class Predicate>
bool pump_until(boost::asio::io_context& io, Predicate done, std::chrono::milliseconds within) {
  auto deadline = std::chrono::steady_clock::now() + within;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(std::chrono::milliseconds(5));
  }
  return done();
}

// A log file's lines, each split into its words.
inline std::vector<std::vector<std::string>> log_words(const std::filesystem::path& path) {
  std::vector<std::vector<std::string>> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<std::string> split;
    for (std::string word; words >> word;) split.push_back(word);
    lines.push_back(std::move(split));
  }
  return lines;
}

}  // namespace kcoral::test
