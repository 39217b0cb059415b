// The runner of kcoral_tests: doctest's own, after building kcoral._native into this
// program as an embedder of the executor does (kcoral/native_module.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "kcoral/native_module.hpp"

int main(int argc, char** argv) {
  if (auto registered = kcoral::register_native_module(); !registered) {
    std::fprintf(stderr, "%s\n", registered.error().message.c_str());
    return 1;
  }
  return doctest::Context(argc, argv).run();
}
