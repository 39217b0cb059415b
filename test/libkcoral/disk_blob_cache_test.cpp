// DiskBlobCache (libkcoral/src/disk_blob_cache.cpp): blobs written by digest survive a
// reopen, come back only whole and unaltered, are bounded in bytes (least recently used
// first), and BlobStore asks the disk before it counts a blob as missing.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "kcoral/blob_store.hpp"
#include "kcoral/disk_blob_cache.hpp"
#include "kcoral/program_builder.hpp"
#include "kcoral/sha256.hpp"
#include "temp_dir.hpp"

namespace {

kcoral::Blob blob_of(std::string_view data) {
  auto blob = kcoral::Blob::copy_of(data);
  REQUIRE(blob.has_value());
  return *blob;
}

std::unique_ptr<kcoral::DiskBlobCache> open_cache(const std::string& directory, std::uint64_t bytes) {
  auto cache = kcoral::DiskBlobCache::open(directory, bytes);
  REQUIRE_MESSAGE(cache.has_value(), cache.error().message);
  return std::move(*cache);
}

void store(kcoral::DiskBlobCache& cache, const std::string& data) {
  cache.store(kcoral::sha256_hex(data), blob_of(data));
  cache.flush();
}

}  // namespace

TEST_SUITE("disk_blob_cache") {

TEST_CASE("a stored blob comes back after the cache is opened again") {
  kcoral::test::TempDir dir;
  std::string data = "kept across a restart";
  {
    auto cache = open_cache(dir.path(), 1 << 20);
    store(*cache, data);
    CHECK(cache->count() == 1);
    CHECK(cache->size_bytes() == data.size());
  }
  auto cache = open_cache(dir.path(), 1 << 20);
  CHECK(cache->count() == 1);
  auto blob = cache->load(kcoral::sha256_hex(data));
  REQUIRE(blob.has_value());
  CHECK(blob->view() == data);
  CHECK_FALSE(cache->load(kcoral::sha256_hex("never stored")).has_value());
  CHECK_FALSE(cache->load("../../etc/passwd").has_value());
}

TEST_CASE("a file altered on disk is not returned, and is removed") {
  kcoral::test::TempDir dir;
  auto cache = open_cache(dir.path(), 1 << 20);
  std::string data = "original bytes";
  std::string digest = kcoral::sha256_hex(data);
  store(*cache, data);
  std::string path = dir.path() + "/" + digest.substr(0, 2) + "/" + digest;
  REQUIRE(std::filesystem::exists(path));
  std::ofstream(path, std::ios::trunc) << "tampered bytes";
  CHECK_FALSE(cache->load(digest).has_value());
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(cache->count() == 0);
}

TEST_CASE("the byte budget evicts the least recently used, and a blob over a quarter is not kept") {
  kcoral::test::TempDir dir;
  auto cache = open_cache(dir.path(), 100);
  std::string a(25, 'a'), b(25, 'b'), c(25, 'c'), d(25, 'd'), e(25, 'e');
  for (const std::string& data : {a, b, c, d}) store(*cache, data);
  CHECK(cache->load(kcoral::sha256_hex(a)).has_value());  // a is now the most recent
  store(*cache, e);
  CHECK(cache->size_bytes() <= 100);
  CHECK(cache->load(kcoral::sha256_hex(a)).has_value());
  CHECK_FALSE(cache->load(kcoral::sha256_hex(b)).has_value());
  store(*cache, std::string(26, 'x'));
  CHECK_FALSE(cache->load(kcoral::sha256_hex(std::string(26, 'x'))).has_value());
}

TEST_CASE("a BlobStore over a disk cache finds there what memory lost") {
  kcoral::test::TempDir dir;
  auto disk = open_cache(dir.path(), 1 << 20);
  std::string data = "uploaded once";
  kcoral::ProgramBuilder builder;
  builder.upload_bytes("b", data);
  auto program = builder.build();
  REQUIRE(program.has_value());
  {
    kcoral::BlobStore first({1 << 20}, disk.get());
    kcoral::BlobMap supplied{{kcoral::sha256_hex(data), blob_of(data)}};
    REQUIRE(first.resolve(program->program, std::move(supplied)).has_value());
    disk->flush();
  }
  kcoral::BlobStore second({1 << 20}, disk.get());  // a new process's empty memory
  auto resolved = second.resolve(program->program, {});
  REQUIRE(resolved.has_value());
  CHECK(resolved->missing.empty());
  CHECK(resolved->blobs.at(kcoral::sha256_hex(data)).view() == data);
  CHECK(second.count() == 1);
}

}  // TEST_SUITE
