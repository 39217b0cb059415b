// The doctest runner of kcoral_server_tests and kcoral_gpu_tests: doctest's own main(),
// so the usual command-line filters (-tc, -ts, -sf) work on them.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
