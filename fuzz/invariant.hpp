// KCORAL_INVARIANT: a property a fuzz target checks after the code under test returned.
//
// A broken invariant prints what failed and where, then aborts, so that libFuzzer reports
// it as a crash and keeps the input, like a sanitizer's finding.
//
//   KCORAL_INVARIANT(parts->size() <= limits.max_parts);
#pragma once

#include <cstdio>
#include <cstdlib>

#define KCORAL_INVARIANT(condition)                                                                  \
  do {                                                                                               \
    if (!(condition)) {                                                                              \
      std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #condition);         \
      std::abort();                                                                                  \
    }                                                                                                \
  } while (false)
