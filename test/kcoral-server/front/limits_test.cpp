// The front's bounds as plain code (kcoral-server/front/descriptors.cpp, inflight_bytes.hpp):
// the descriptor plan keeps what fits, lowers the cache's files before connections, and
// refuses a limit too low; the in-flight budget grants what fits, refuses what does not,
// counts what is already in memory, and releases a holder's share at once; a tenant's part
// of it refuses past its own limit, as the whole budget does past the server's.
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

TEST_CASE("a reservation gives back part of what it holds, in the tenant's budget too, never more than it holds") {
  kcoral::InflightBytes server(100), alice(80);
  kcoral::InflightBytes::Reservation held(server);
  held.set_tenant(&alice);
  CHECK(held.grow_to(70));
  held.give_back(50);
  CHECK(held.held() == 20);
  CHECK(server.used() == 20);
  CHECK(alice.used() == 20);
  held.give_back(1000);
  CHECK(held.held() == 0);
  CHECK(server.used() == 0);
  CHECK(alice.used() == 0);
}

TEST_CASE("a tenant's budget bounds its requests within the server's, and says it was the one that refused") {
  kcoral::InflightBytes server(100), alice(60), bob(60);
  kcoral::InflightBytes::Reservation first(server), second(server), third(server);
  first.set_tenant(&alice);
  second.set_tenant(&alice);
  third.set_tenant(&bob);
  CHECK(first.grow_to(50));
  CHECK_FALSE(second.grow_to(20));  // alice's 60 would be passed; the server has room
  CHECK(second.tenant_refused());
  CHECK(server.used() == 50);       // nothing taken by the refusal
  CHECK(alice.used() == 50);
  CHECK(third.grow_to(50));         // bob's own part
  CHECK_FALSE(second.grow_to(10));  // fits alice's, not the server's
  CHECK_FALSE(second.tenant_refused());
  CHECK(alice.used() == 50);        // given back
  first.add(5);                     // already in memory: counted in both
  CHECK(alice.used() == 55);
  CHECK(server.used() == 105);
  first.release();
  CHECK(alice.used() == 0);
  CHECK(server.used() == 50);
  // A keep-alive connection's next request may be another tenant's.
  first.set_tenant(&bob);
  CHECK_FALSE(first.grow_to(20));
  CHECK(first.tenant_refused());
  third.release();
  CHECK(first.grow_to(20));
  CHECK(bob.used() == 20);
  first.set_tenant(nullptr);  // releases what it held
  CHECK(bob.used() == 0);
  CHECK(server.used() == 0);
}

TEST_CASE("on a server of one tenant, whose part is the whole budget, a refusal is the server's") {
  kcoral::InflightBytes server(100), only(100);
  kcoral::InflightBytes::Reservation health(server), first(server), second(server);
  CHECK(health.grow_to(30));  // a request of no tenant (GET /health without a token)
  first.set_tenant(&only);
  second.set_tenant(&only);
  CHECK(first.grow_to(60));
  CHECK_FALSE(second.grow_to(20));
  CHECK_FALSE(second.tenant_refused());
  CHECK(only.used() == 60);
}

}  // TEST_SUITE
