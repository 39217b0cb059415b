// BlobStore (libkcoral/src/blob_store.cpp): the content-addressed cache. LRU eviction by
// bytes, blobs and files (a request's slices sharing one memfd, charged once), get()
// refreshing recency, blobs over a quarter of the budget used but not kept, pins that keep
// a running program's blobs from eviction, and resolve(): supplied blobs stored, the
// missing ones listed in first-use order, tensor byte counts checked, and no memfd handed
// out that holds blobs the program did not reference. Tenants are apart: a blob is found
// only by the tenant that uploaded it, the same bytes of two tenants are two entries with
// pins of their own, and the budgets are the server's.
#include <doctest/doctest.h>

#include <set>
#include <thread>

#include "kcoral/blob_store.hpp"
#include "kcoral/program_builder.hpp"
#include "kcoral/sha256.hpp"

namespace {

kcoral::Blob blob_of(std::string_view data) {
  auto blob = kcoral::Blob::copy_of(data);
  REQUIRE(blob.has_value());
  return *blob;
}

// 25 bytes: a quarter of the 100-byte budget the tests use.
std::string quarter(char c) { return std::string(25, c); }

// The tests' blobs are alice's, unless a test says whose.
void put(kcoral::BlobStore& store, const std::string& data, std::string_view tenant = "alice") {
  store.put(tenant, kcoral::sha256_hex(data), blob_of(data));
}

bool has(kcoral::BlobStore& store, const std::string& data, std::string_view tenant = "alice") {
  return store.get(tenant, kcoral::sha256_hex(data)).has_value();
}

// A program that uploads each of `datas` as bytes.
kcoral::Program program_of(const std::vector<std::string>& datas) {
  kcoral::ProgramBuilder b;
  for (std::size_t i = 0; i < datas.size(); ++i) b.upload_bytes("b" + std::to_string(i), datas[i]);
  auto built = b.build();
  REQUIRE(built.has_value());
  return built->program;
}

kcoral::BlobMap supplied(const std::vector<std::string>& datas) {
  kcoral::BlobMap map;
  for (const std::string& data : datas) map.emplace(kcoral::sha256_hex(data), blob_of(data));
  return map;
}

// The datas as slices of one memfd, as a request's blobs arrive.
kcoral::BlobMap one_file(const std::vector<std::string>& datas) {
  kcoral::BlobBuilder builder;
  for (const std::string& data : datas) REQUIRE(builder.append(data).has_value());
  auto parts = builder.finish();
  REQUIRE(parts.has_value());
  kcoral::BlobMap map;
  for (std::size_t i = 0; i < datas.size(); ++i) map.emplace(kcoral::sha256_hex(datas[i]), (*parts)[i]);
  return map;
}

}  // namespace

TEST_SUITE("blob_store") {

TEST_CASE("a stored blob can be got back; unknown digests are absent") {
  kcoral::BlobStore store(100);
  CHECK(store.capacity_bytes() == 100);
  put(store, "hello");
  auto blob = store.get("alice", kcoral::sha256_hex("hello"));
  REQUIRE(blob.has_value());
  CHECK(blob->view() == "hello");
  CHECK_FALSE(store.get("alice", kcoral::sha256_hex("other")).has_value());
  CHECK(store.count() == 1);
  CHECK(store.size_bytes() == 5);
}

TEST_CASE("putting a digest twice keeps one entry") {
  kcoral::BlobStore store(100);
  put(store, "twice");
  put(store, "twice");
  CHECK(store.count() == 1);
  CHECK(store.size_bytes() == 5);
}

TEST_CASE("the least recently used blobs go first when the byte budget is exceeded") {
  kcoral::BlobStore store(100);
  for (char c : {'a', 'b', 'c', 'd'}) put(store, quarter(c));
  CHECK(store.size_bytes() == 100);
  CHECK(store.count() == 4);
  put(store, quarter('e'));
  CHECK(store.size_bytes() == 100);
  CHECK_FALSE(has(store, quarter('a')));
  // get() refreshes: b is now the most recent, so c goes next.
  CHECK(has(store, quarter('b')));
  put(store, quarter('f'));
  CHECK(has(store, quarter('b')));
  CHECK_FALSE(has(store, quarter('c')));
  CHECK(has(store, quarter('d')));
  // put() of a known digest refreshes too.
  put(store, quarter('d'));
  put(store, quarter('g'));
  CHECK(has(store, quarter('d')));
  CHECK_FALSE(has(store, quarter('e')));
}

TEST_CASE("a blob larger than a quarter of the budget is not kept") {
  kcoral::BlobStore store(100);
  put(store, std::string(26, 'x'));
  CHECK(store.count() == 0);
  CHECK(store.size_bytes() == 0);
  put(store, std::string(25, 'x'));
  CHECK(store.count() == 1);
}

TEST_CASE("resolve lists missing digests in first-use order and returns the present ones") {
  kcoral::BlobStore store(1000);
  put(store, "cached");
  auto program = program_of({"later", "cached", "sent", "first"});
  auto resolved = store.resolve("alice", program, supplied({"sent"}));
  REQUIRE(resolved.has_value());
  CHECK(resolved->missing == std::vector<std::string>{kcoral::sha256_hex("later"), kcoral::sha256_hex("first")});
  CHECK(resolved->blobs.size() == 2);
  CHECK(resolved->blobs.at(kcoral::sha256_hex("cached")).view() == "cached");
  CHECK(resolved->blobs.at(kcoral::sha256_hex("sent")).view() == "sent");
  // Supplied blobs are cached for the next request.
  CHECK(has(store, "sent"));
}

TEST_CASE("a supplied blob too big to keep is still resolved for its request") {
  kcoral::BlobStore store(100);
  const std::string big(60, 'B');
  auto resolved = store.resolve("alice", program_of({big}), supplied({big}));
  REQUIRE(resolved.has_value());
  CHECK(resolved->missing.empty());
  CHECK(resolved->blobs.at(kcoral::sha256_hex(big)).view() == big);
  CHECK(store.count() == 0);
}

TEST_CASE("pinned blobs are not evicted; unpinned ones go instead") {
  kcoral::BlobStore store(100);
  auto resolved = store.resolve("alice", program_of({quarter('a'), quarter('b')}), supplied({quarter('a'), quarter('b')}));
  REQUIRE(resolved.has_value());
  for (char c : {'c', 'd', 'e', 'f', 'g'}) put(store, quarter(c));
  CHECK(has(store, quarter('a')));
  CHECK(has(store, quarter('b')));
  CHECK_FALSE(has(store, quarter('c')));
  CHECK(store.size_bytes() <= 100);
}

TEST_CASE("while every entry is pinned a new blob cannot push a pinned one out") {
  kcoral::BlobStore store(100);
  std::vector<std::string> four{quarter('a'), quarter('b'), quarter('c'), quarter('d')};
  auto running = store.resolve("alice", program_of(four), supplied(four));
  REQUIRE(running.has_value());
  auto next = store.resolve("alice", program_of({quarter('e')}), supplied({quarter('e')}));
  REQUIRE(next.has_value());
  CHECK(next->blobs.at(kcoral::sha256_hex(quarter('e'))).view() == quarter('e'));
  for (const std::string& data : four) CHECK(has(store, data));
  // Once the pins go, the store is back within its budget.
  running = {};
  next = {};
  put(store, quarter('f'));
  CHECK(store.size_bytes() <= 100);
  CHECK(has(store, quarter('f')));
}

TEST_CASE("a blob is the most recently used when its last pin goes") {
  // Pinned blobs are out of the LRU order, so that eviction never walks past them (a put
  // beside a program's thousands of pinned blobs walked them all); they come back as just used.
  kcoral::BlobStore store(100);
  auto running = store.resolve("alice", program_of({quarter('a')}), supplied({quarter('a')}));
  REQUIRE(running.has_value());
  for (char c : {'b', 'c', 'd'}) put(store, quarter(c));
  running = {};  // 'a' unpinned: now the most recent, 'b' the least
  put(store, quarter('e'));
  CHECK(has(store, quarter('a')));
  CHECK_FALSE(has(store, quarter('b')));
  CHECK(has(store, quarter('e')));
  CHECK(store.size_bytes() <= 100);
}

TEST_CASE("a moved pin keeps its blobs pinned until the last owner goes") {
  kcoral::BlobStore store(100);
  std::optional<kcoral::BlobStore::Pin> moved;
  {
    auto resolved = store.resolve("alice", program_of({quarter('a')}), supplied({quarter('a')}));
    REQUIRE(resolved.has_value());
    moved.emplace(std::move(resolved->pin));
    kcoral::BlobStore::Pin assigned;
    assigned = std::move(*moved);
    *moved = std::move(assigned);
  }  // the moved-from pins are gone; `moved` still pins
  for (char c : {'b', 'c', 'd', 'e', 'f'}) put(store, quarter(c));
  CHECK(has(store, quarter('a')));
  moved.reset();
  for (char c : {'g', 'h', 'i', 'j'}) put(store, quarter(c));
  CHECK_FALSE(has(store, quarter('a')));
}

TEST_CASE("two requests pinning one blob keep it until both are done") {
  kcoral::BlobStore store(100);
  auto first = store.resolve("alice", program_of({quarter('a')}), supplied({quarter('a')}));
  auto second = store.resolve("alice", program_of({quarter('a')}), {});
  REQUIRE(first.has_value());
  REQUIRE(second.has_value());
  CHECK(second->missing.empty());
  first = {};
  for (char c : {'b', 'c', 'd', 'e', 'f'}) put(store, quarter(c));
  CHECK(has(store, quarter('a')));
  second = {};
  for (char c : {'g', 'h', 'i', 'j'}) put(store, quarter(c));
  CHECK_FALSE(has(store, quarter('a')));
}

TEST_CASE("resolve checks that a tensor blob holds prod(shape) x itemsize bytes") {
  kcoral::BlobStore store(1 << 20);
  auto tensor_program = [](const std::string& data, std::vector<std::int64_t> shape) {
    kcoral::ProgramBuilder b;
    b.upload_tensor("t", data, kcoral::Dtype::float32, std::move(shape));
    auto built = b.build();
    REQUIRE(built.has_value());
    return built->program;
  };
  const std::string six_floats(24, '\0');
  CHECK(store.resolve("alice", tensor_program(six_floats, {2, 3}), supplied({six_floats})).has_value());
  auto wrong = store.resolve("alice", tensor_program(six_floats, {2, 4}), supplied({six_floats}));
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().kind == kcoral::ErrorKind::parse);
  CHECK(wrong.error().message.find("'t'") != std::string::npos);
  // The same check applies to a blob found in the cache.
  CHECK_FALSE(store.resolve("alice", tensor_program(six_floats, {7}), {}).has_value());
  CHECK(store.resolve("alice", tensor_program("", {0, 3}), supplied({""})).has_value());
  CHECK_FALSE(store.resolve("alice", tensor_program("", {1}), supplied({""})).has_value());
  // A scalar is one item.
  CHECK(store.resolve("alice", tensor_program(std::string(4, '\0'), {}), supplied({std::string(4, '\0')})).has_value());
  // A missing tensor blob is a cache miss, not a size error.
  auto missing = store.resolve("alice", tensor_program(std::string(8, 'm'), {2}), {});
  REQUIRE(missing.has_value());
  CHECK(missing->missing.size() == 1);
}

TEST_CASE("slices of one memfd are kept with one descriptor and charged for the whole file once") {
  kcoral::BlobStore store(1000);
  std::vector<std::string> datas;
  for (char c : {'a', 'b', 'c', 'd'}) datas.push_back(std::string(10, c));
  auto resolved = store.resolve("alice", program_of(datas), one_file(datas));
  REQUIRE(resolved.has_value());
  CHECK(store.count() == 4);
  CHECK(store.files() == 1);
  CHECK(store.size_bytes() == 40);
  // The program used the whole file: it is handed out as it is.
  std::set<int> fds;
  for (const auto& [digest, blob] : resolved->blobs) fds.insert(blob.fd());
  CHECK(fds.size() == 1);
}

TEST_CASE("the file budget bounds the descriptors the cache holds") {
  kcoral::BlobStore store({.bytes = 1 << 20, .blobs = 1000, .files = 3});
  for (int i = 0; i < 10; ++i) put(store, "blob " + std::to_string(i));
  CHECK(store.files() == 3);
  CHECK(store.count() == 3);
  CHECK(has(store, "blob 9"));
  CHECK_FALSE(has(store, "blob 6"));
  // Many blobs of one request take one file.
  std::vector<std::string> datas;
  for (int i = 0; i < 500; ++i) datas.push_back("shared " + std::to_string(i));
  REQUIRE(store.resolve("alice", program_of(datas), one_file(datas)).has_value());
  CHECK(store.files() <= 3);
  CHECK(store.count() >= 500);
}

TEST_CASE("the blob budget bounds the entries") {
  kcoral::BlobStore store({.bytes = 1 << 20, .blobs = 5, .files = 1000});
  std::vector<std::string> datas;
  for (int i = 0; i < 50; ++i) datas.push_back("many " + std::to_string(i));
  REQUIRE(store.resolve("alice", program_of(datas), one_file(datas)).has_value());
  // Pinned while the resolution lived, released now: back within the budget.
  CHECK(store.count() <= 5);
  CHECK(store.files() == 1);
}

TEST_CASE("a program never gets a memfd that holds blobs it did not reference") {
  kcoral::BlobStore store(1 << 20);
  std::string secret = "another client's secret";
  std::string shared = "a blob both clients know";
  REQUIRE(store.resolve("alice", program_of({secret, shared}), one_file({secret, shared})).has_value());
  auto resolved = store.resolve("alice", program_of({shared}), {});
  REQUIRE(resolved.has_value());
  REQUIRE(resolved->missing.empty());
  const kcoral::Blob& blob = resolved->blobs.at(kcoral::sha256_hex(shared));
  CHECK(blob.view() == shared);
  CHECK(blob.file_size() == shared.size());  // its own copy: the secret is not behind its descriptor
  CHECK(blob.offset() == 0);
}

TEST_CASE("the copies a program needs are asked of its budget first, and refused as busy") {
  // A client naming a large cached blob whose memfd holds another: each program of it
  // needs a copy of its own, which the caller's budget must take before it is made.
  kcoral::BlobStore store(std::size_t{16} << 20);
  std::string large(std::size_t{1} << 20, 'L');
  std::string other = "uploaded with it";
  REQUIRE(store.resolve("alice", program_of({large, other}), one_file({large, other})).has_value());
  std::vector<std::uint64_t> asked;
  auto allow = [&](std::uint64_t bytes) {
    asked.push_back(bytes);
    return true;
  };
  // to_make says beforehand what resolve will ask (a server does that step elsewhere).
  CHECK(store.to_make("alice", program_of({large}), {}).bytes == large.size());
  CHECK(store.to_make("alice", program_of({large}), {}).blobs == 0);  // copied, not read back
  auto copied = store.resolve("alice", program_of({large}), {}, allow);
  REQUIRE(copied.has_value());
  CHECK(asked == std::vector<std::uint64_t>{large.size()});
  // Blobs it uses whole (their memfd holds nothing else) cost nothing.
  asked.clear();
  CHECK(store.to_make("alice", program_of({large, other}), {}).bytes == 0);
  REQUIRE(store.resolve("alice", program_of({large, other}), {}, allow).has_value());
  CHECK(asked.empty());
  // Nor do supplied blobs used whole, nor blobs another tenant holds (missing to this one).
  CHECK(store.to_make("alice", program_of({"new"}), supplied({"new"})).bytes == 0);
  CHECK(store.to_make("bob", program_of({large}), {}).bytes == 0);
  // Refused: the program is not admitted, and nothing was copied.
  auto refused = store.resolve("alice", program_of({large}), {}, [](std::uint64_t) { return false; });
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().kind == kcoral::ErrorKind::busy);
  CHECK(refused.error().message.find(std::to_string(large.size()) + " bytes of cached blobs") != std::string::npos);
}

TEST_CASE("a small slice of a large file is kept as a copy, not by keeping the file alive") {
  kcoral::BlobStore store(std::size_t{64} << 20);
  std::string large(std::size_t{3} << 20, 'L');  // over the 1 MiB slack, under a quarter of the budget
  std::string small = "small";
  auto request = one_file({large, small});
  store.put("alice", kcoral::sha256_hex(small), request.at(kcoral::sha256_hex(small)));
  CHECK(store.size_bytes() == small.size());
  auto kept = store.get("alice", kcoral::sha256_hex(small));
  REQUIRE(kept.has_value());
  CHECK(kept->file_size() == small.size());
}

TEST_CASE("a request's small blobs beside a large one are copied together, a memfd to about 1 MiB") {
  kcoral::BlobStore store(std::size_t{64} << 20);
  std::vector<std::string> datas{std::string(std::size_t{3} << 20, 'L')};
  for (std::size_t i = 0; i < 3000; ++i) datas.push_back(std::to_string(i) + std::string(1000, 's'));
  store.put_all("alice", one_file(datas));
  std::set<int> small_files;
  for (std::size_t i = 1; i < datas.size(); ++i) {
    auto kept = store.get("alice", kcoral::sha256_hex(datas[i]));
    REQUIRE(kept.has_value());
    CHECK(kept->file_size() <= std::size_t{1} << 20);
    CHECK(std::string_view(reinterpret_cast<const char*>(kept->bytes().data()), kept->size()) == datas[i]);
    small_files.insert(kept->fd());
  }
  CHECK(small_files.size() == 3);  // 3 MB of them; a memfd apiece before
  auto large = store.get("alice", kcoral::sha256_hex(datas[0]));
  REQUIRE(large.has_value());
  CHECK(small_files.count(large->fd()) == 0);  // the large one stays where it came, with no copy
  CHECK(large->file_size() > datas[0].size());
}

TEST_CASE("concurrent puts and gets keep the store consistent") {
  kcoral::BlobStore store(1000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < 300; ++i) {
        std::string data = std::to_string(t) + ":" + std::to_string(i % 40) + std::string(100, 'p');
        auto blob = kcoral::Blob::copy_of(data);
        if (blob) store.put("alice", kcoral::sha256_hex(data), *blob);
        (void)store.get("alice", kcoral::sha256_hex(data));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(store.size_bytes() <= 1000);
  CHECK(store.count() * 100 <= store.size_bytes());
}

TEST_CASE("a tenant finds only the blobs it uploaded: another's digest is missing, as one nobody sent") {
  kcoral::BlobStore store(1 << 20);
  const std::string pin = "alice's PIN: 4821";
  REQUIRE(store.resolve("alice", program_of({pin}), supplied({pin})).has_value());
  CHECK(has(store, pin, "alice"));
  CHECK_FALSE(has(store, pin, "bob"));
  // Bob names alice's digest, and one nobody sent: both missing, in the same answer.
  auto guessed = store.resolve("bob", program_of({pin, "nobody's"}), {});
  REQUIRE(guessed.has_value());
  CHECK(guessed->missing == std::vector<std::string>{kcoral::sha256_hex(pin), kcoral::sha256_hex("nobody's")});
  CHECK(guessed->blobs.empty());
  // Bob's own upload of the same bytes is an entry of his own; alice's stays hers.
  REQUIRE(store.resolve("bob", program_of({pin}), supplied({pin})).has_value());
  CHECK(has(store, pin, "bob"));
  CHECK(store.count() == 2);
  CHECK(store.usage("alice").blobs == 1);
  CHECK(store.usage("bob").blobs == 1);
  CHECK(store.usage("bob").bytes == pin.size());
  CHECK(store.usage("carol").blobs == 0);
}

TEST_CASE("the budgets are shared: one tenant's uploads evict another's least recently used") {
  kcoral::BlobStore store(100);
  for (char c : {'a', 'b', 'c', 'd'}) put(store, quarter(c), "alice");
  put(store, quarter('e'), "bob");
  CHECK(store.size_bytes() == 100);
  CHECK_FALSE(has(store, quarter('a'), "alice"));
  CHECK(has(store, quarter('b'), "alice"));
  CHECK(store.usage("alice").bytes == 75);
  CHECK(store.usage("bob").bytes == 25);
}

TEST_CASE("the same bytes pinned by two tenants are two pins: one's end leaves the other's") {
  kcoral::BlobStore store(100);
  auto alice = store.resolve("alice", program_of({quarter('a')}), supplied({quarter('a')}));
  auto bob = store.resolve("bob", program_of({quarter('a')}), supplied({quarter('a')}));
  REQUIRE(alice.has_value());
  REQUIRE(bob.has_value());
  bob = {};
  for (char c : {'b', 'c', 'd', 'e', 'f'}) put(store, quarter(c), "carol");
  CHECK(has(store, quarter('a'), "alice"));
  CHECK_FALSE(has(store, quarter('a'), "bob"));
}

}  // TEST_SUITE
