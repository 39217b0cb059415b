// The front's bounds as plain code (kcoral-server/front/descriptors.cpp, inflight_bytes.hpp):
// the descriptor plan keeps what fits, lowers the cache's files before connections, and
// refuses a limit too low; the in-flight budget grants what fits, refuses what does not,
// counts what is already in memory, and releases a holder's share at once.
#include <doctest/doctest.h>

#include "descriptors.hpp"
#include "inflight_bytes.hpp"

TEST_SUITE("limits") {

TEST_CASE("a descriptor limit that holds every bound keeps them") {
  auto plan = kcoral::plan_descriptors(1 << 20, 4096, 4096, 8);
  CHECK(plan.max_connections == 4096);
  CHECK(plan.blob_cache_files == 4096);
  CHECK(plan.adjusted.empty());
}

TEST_CASE("a low descriptor limit lowers the cache's files, then connections, to fit") {
  auto plan = kcoral::plan_descriptors(1024, 4096, 4096, 8);
  CHECK(plan.blob_cache_files < 4096);
  CHECK(plan.max_connections < 4096);
  CHECK(plan.max_connections >= 16);
  // What the plan allows fits: two per connection, the cache, the overflow, workers, reserve.
  CHECK(2 * plan.max_connections + plan.blob_cache_files + kcoral::kOverflowConnections + 4 * 8 + 128 <= 1024);
  CHECK(plan.adjusted.find("--max-connections") != std::string::npos);
  CHECK(plan.adjusted.find("--blob-cache-max-files") != std::string::npos);
}

TEST_CASE("a descriptor limit too low for the workers is refused") {
  CHECK(kcoral::plan_descriptors(256, 4096, 4096, 32).max_connections == 0);
}

TEST_CASE("the in-flight budget grants what fits and refuses the rest until released") {
  kcoral::InflightBytes budget(100);
  kcoral::InflightBytes::Reservation first(budget), second(budget);
  CHECK(first.grow_to(60));
  CHECK(first.grow_to(40));  // never shrinks
  CHECK(first.held() == 60);
  CHECK_FALSE(second.grow_to(41));
  CHECK(second.held() == 0);
  CHECK(second.grow_to(40));
  CHECK(budget.used() == 100);
  first.release();
  CHECK(budget.used() == 40);
  second.add(500);  // already in memory: counted past the limit
  CHECK(budget.used() == 540);
  {
    kcoral::InflightBytes::Reservation third(budget);
    CHECK_FALSE(third.grow_to(1));
  }
  second.release();
  CHECK(budget.used() == 0);
  CHECK_FALSE(kcoral::InflightBytes::Reservation(budget).grow_to(101));
}

}  // TEST_SUITE
