// The doctest runner shared by kcoral_tests and kcoral_server_tests: doctest's own main(),
// so the usual command-line filters (-tc, -ts, -sf) work on both executables.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
