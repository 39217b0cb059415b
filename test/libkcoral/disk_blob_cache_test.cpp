// DiskBlobCache (libkcoral/src/disk_blob_cache.cpp): blobs written by digest survive a
// reopen, come back only whole and unaltered, are bounded in bytes (least recently used
// first), and BlobStore asks the disk before it counts a blob as missing. Each tenant's
// blobs are in a directory of its own and found by that tenant alone, across a reopen too;
// blobs of the layout without tenants are removed at open. A directory of another owner,
// or one others may write to, is refused; links and other non-files planted under it are
// never followed, read or written through.
#include <doctest/doctest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

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

std::unique_ptr<kcoral::DiskBlobCache> open_cache(const std::string& directory, std::uint64_t bytes,
                                                 std::size_t max_blobs = 1024) {
  auto cache = kcoral::DiskBlobCache::open(directory, bytes, max_blobs);
  REQUIRE_MESSAGE(cache.has_value(), cache.error().message);
  return std::move(*cache);
}

// The tests' blobs are alice's, unless a test says whose.
void store(kcoral::DiskBlobCache& cache, const std::string& data, std::string_view tenant = "alice") {
  cache.store(tenant, kcoral::sha256_hex(data), blob_of(data));
  cache.flush();
}

std::optional<kcoral::Blob> load(kcoral::DiskBlobCache& cache, const std::string& digest,
                                 std::string_view tenant = "alice") {
  return cache.load(tenant, digest);
}

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// Where the cache in `directory` keeps `tenant`'s `data`, and the directories above it.
std::string tenant_path(const std::string& directory, std::string_view tenant = "alice") {
  return directory + "/" + kcoral::DiskBlobCache::tenant_directory(tenant);
}

std::string prefix_path(const std::string& directory, const std::string& data, std::string_view tenant = "alice") {
  return tenant_path(directory, tenant) + "/" + kcoral::sha256_hex(data).substr(0, 2);
}

std::string path_of(const std::string& directory, const std::string& data, std::string_view tenant = "alice") {
  return prefix_path(directory, data, tenant) + "/" + kcoral::sha256_hex(data);
}

std::string open_error(const std::string& directory) {
  auto cache = kcoral::DiskBlobCache::open(directory, 1 << 20, 1024);
  REQUIRE_FALSE(cache.has_value());
  return cache.error().message;
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
    CHECK(cache->size_bytes() == kcoral::DiskBlobCache::charged(data.size()));
  }
  auto cache = open_cache(dir.path(), 1 << 20);
  CHECK(cache->count() == 1);
  auto blob = load(*cache, kcoral::sha256_hex(data));
  REQUIRE(blob.has_value());
  CHECK(blob->view() == data);
  CHECK_FALSE(load(*cache, kcoral::sha256_hex("never stored")).has_value());
  CHECK_FALSE(load(*cache, "../../etc/passwd").has_value());
}

TEST_CASE("a file altered on disk is not returned, and is removed") {
  kcoral::test::TempDir dir;
  auto cache = open_cache(dir.path(), 1 << 20);
  std::string data = "original bytes";
  std::string digest = kcoral::sha256_hex(data);
  store(*cache, data);
  std::string path = path_of(dir.path(), data);
  REQUIRE(std::filesystem::exists(path));
  std::ofstream(path, std::ios::trunc) << "tampered bytes";
  CHECK_FALSE(load(*cache, digest).has_value());
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(cache->count() == 0);
}

TEST_CASE("the byte budget evicts the least recently used, and a blob over a quarter is not kept") {
  kcoral::test::TempDir dir;
  const std::uint64_t budget = 4 * kcoral::DiskBlobCache::charged(4096);
  auto cache = open_cache(dir.path(), budget);
  std::string a(4096, 'a'), b(4096, 'b'), c(4096, 'c'), d(4096, 'd'), e(4096, 'e');
  for (const std::string& data : {a, b, c, d}) store(*cache, data);
  CHECK(load(*cache, kcoral::sha256_hex(a)).has_value());  // a is now the most recent
  store(*cache, e);
  CHECK(cache->size_bytes() <= budget);
  CHECK(load(*cache, kcoral::sha256_hex(a)).has_value());
  CHECK_FALSE(load(*cache, kcoral::sha256_hex(b)).has_value());
  store(*cache, std::string(4097, 'x'));
  CHECK_FALSE(load(*cache, kcoral::sha256_hex(std::string(4097, 'x'))).has_value());
}

TEST_CASE("a blob is charged its blocks and one more, so that tiny blobs cannot pass the disk's inodes") {
  CHECK(kcoral::DiskBlobCache::charged(0) == 4096);
  CHECK(kcoral::DiskBlobCache::charged(8) == 8192);
  CHECK(kcoral::DiskBlobCache::charged(4096) == 8192);
  CHECK(kcoral::DiskBlobCache::charged(4097) == 12288);
  kcoral::test::TempDir dir;
  auto cache = open_cache(dir.path(), 5 * 8192);
  for (int i = 0; i < 10; ++i) store(*cache, "tiny " + std::to_string(i));  // 10 bytes of blobs, 80 KiB charged
  CHECK(cache->count() == 5);
  CHECK(cache->size_bytes() == 5 * 8192);
}

TEST_CASE("the blob bound evicts the least recently used, and holds across a reopen") {
  kcoral::test::TempDir dir;
  {
    auto cache = open_cache(dir.path(), 1 << 20, 3);
    for (const char* data : {"one", "two", "three"}) store(*cache, data);
    CHECK(load(*cache, kcoral::sha256_hex("one")).has_value());  // now the most recent
    store(*cache, "four");
    CHECK(cache->count() == 3);
    // The evicted blob's file is gone too (removed once the index lets it go).
    const std::string two = kcoral::sha256_hex("two");
    CHECK_FALSE(std::filesystem::exists(tenant_path(dir.path()) + "/" + two.substr(0, 2) + "/" + two));
    CHECK(load(*cache, kcoral::sha256_hex("one")).has_value());
    CHECK_FALSE(load(*cache, two).has_value());
  }
  auto cache = open_cache(dir.path(), 1 << 20, 2);
  CHECK(cache->count() == 2);
}

TEST_CASE("blobs are not kept past a tenth of the file system's free space, whatever the budget") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: mounting a small file system needs root");
    return;
  }
  kcoral::test::TempDir dir;
  const std::string small = dir / "small";
  REQUIRE(::mkdir(small.c_str(), 0700) == 0);
  REQUIRE(::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=2m,mode=0700") == 0);
  {
    auto cache = open_cache(small + "/cache", std::uint64_t{16} << 20);  // a budget 8 times the disk
    for (int i = 0; i < 40; ++i) store(*cache, std::string(std::size_t{100} << 10, static_cast<char>('a' + i % 26)) +
                                                   std::to_string(i));
    struct statvfs info {};
    REQUIRE(::statvfs(small.c_str(), &info) == 0);
    CHECK(info.f_bavail * 10 >= info.f_blocks);  // a tenth left for what else lives there
    CHECK(cache->count() > 5);                   // and the rest used
  }
  ::umount2(small.c_str(), MNT_DETACH);
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
    REQUIRE(first.resolve("alice", program->program, std::move(supplied)).has_value());
    disk->flush();
  }
  kcoral::BlobStore second({1 << 20}, disk.get());  // a new process's empty memory
  // What resolve will read back, said beforehand (a server does that step elsewhere), and
  // then asked of the budget; for another tenant, nothing.
  CHECK(second.to_make("alice", program->program, {}).bytes == data.size());
  CHECK(second.to_make("alice", program->program, {}).blobs == 1);
  CHECK(second.to_make("bob", program->program, {}).blobs == 0);
  std::vector<std::uint64_t> asked;
  auto resolved = second.resolve("alice", program->program, {}, [&](std::uint64_t bytes) {
    asked.push_back(bytes);
    return true;
  });
  REQUIRE(resolved.has_value());
  CHECK(asked == std::vector<std::uint64_t>{data.size()});
  CHECK(second.to_make("alice", program->program, {}).blobs == 0);  // in memory now
  CHECK(resolved->missing.empty());
  CHECK(resolved->blobs.at(kcoral::sha256_hex(data)).view() == data);
  CHECK(second.count() == 1);
}

TEST_CASE("a missing directory is made, mode 0700, and one of the server's own is made 0700") {
  kcoral::test::TempDir dir;
  std::string made = dir / "a/b/cache";
  open_cache(made, 1 << 20);
  CHECK((std::filesystem::status(made).permissions() & std::filesystem::perms::all) ==
        std::filesystem::perms::owner_all);
  REQUIRE(::chmod(made.c_str(), 0755) == 0);
  open_cache(made, 1 << 20);
  CHECK((std::filesystem::status(made).permissions() & std::filesystem::perms::all) ==
        std::filesystem::perms::owner_all);
}

TEST_CASE("a directory of another owner is refused, saying what to do") {
  kcoral::test::TempDir dir;
  std::string theirs = dir / "theirs";
  std::filesystem::create_directory(theirs);
  if (::chown(theirs.c_str(), 65534, 65534) != 0) {
    MESSAGE("not run: giving a directory to uid 65534 needs root");
    return;
  }
  std::string message = open_error(theirs);
  CHECK(message.find("belongs to uid 65534") != std::string::npos);
  CHECK(message.find("chown") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(theirs + "/tmp"));  // nothing made in it either
}

TEST_CASE("a directory its group or others may write to is refused, saying what to do") {
  kcoral::test::TempDir dir;
  for (mode_t mode : {0777, 0770, 0702}) {
    CAPTURE(mode);
    std::string shared = dir / ("shared-" + std::to_string(mode));
    std::filesystem::create_directory(shared);
    REQUIRE(::chmod(shared.c_str(), mode) == 0);
    std::string message = open_error(shared);
    CHECK(message.find("writable by its group or by others") != std::string::npos);
    CHECK(message.find("chmod 700 " + shared) != std::string::npos);
  }
}

TEST_CASE("a link planted under a digest's name is not read, whatever it points at") {
  kcoral::test::TempDir dir;
  std::string cache_dir = dir / "cache";
  std::string data = "the right bytes";
  std::string digest = kcoral::sha256_hex(data);
  std::string outside = dir / "outside";
  std::ofstream(outside) << data;
  {
    // A kept blob's file swapped for a link to the same bytes.
    auto cache = open_cache(cache_dir, 1 << 20);
    store(*cache, data);
    REQUIRE(cache->count() == 1);
    std::filesystem::remove(path_of(cache_dir, data));
    std::filesystem::create_symlink(outside, path_of(cache_dir, data));
    CHECK_FALSE(load(*cache, digest).has_value());
    CHECK(cache->count() == 0);
    CHECK_FALSE(std::filesystem::is_symlink(path_of(cache_dir, data)));  // the link went
    CHECK(read_text(outside) == data);                                  // not its target
  }
  {
    // Links found at open: to /etc/passwd under its own digest, and a digest's directory
    // that is a link to one holding the right bytes.
    std::string passwd = read_text("/etc/passwd");
    std::string passwd_digest = kcoral::sha256_hex(passwd);
    std::filesystem::create_directories(prefix_path(cache_dir, passwd));
    std::filesystem::create_symlink("/etc/passwd", path_of(cache_dir, passwd));
    std::string elsewhere = dir / "elsewhere";
    std::filesystem::create_directory(elsewhere);
    std::ofstream(elsewhere + "/" + digest) << data;
    std::filesystem::remove_all(prefix_path(cache_dir, data));
    std::filesystem::create_directory_symlink(elsewhere, prefix_path(cache_dir, data));
    auto cache = open_cache(cache_dir, 1 << 20);
    CHECK(cache->count() == 0);
    CHECK_FALSE(load(*cache, passwd_digest).has_value());
    CHECK_FALSE(load(*cache, digest).has_value());
    CHECK(read_text("/etc/passwd") == passwd);
    CHECK(read_text(elsewhere + "/" + digest) == data);
  }
}

TEST_CASE("nothing is written through a planted link") {
  kcoral::test::TempDir dir;
  std::string cache_dir = dir / "cache";
  auto cache = open_cache(cache_dir, 1 << 20);
  // A link under the digest's name is replaced by the blob's file, its target untouched.
  std::string data = "stored over a link";
  std::string victim = dir / "victim";
  std::ofstream(victim) << "victim's own bytes";
  std::filesystem::create_directories(std::filesystem::path(path_of(cache_dir, data)).parent_path());
  std::filesystem::create_symlink(victim, path_of(cache_dir, data));
  store(*cache, data);
  CHECK(read_text(victim) == "victim's own bytes");
  CHECK_FALSE(std::filesystem::is_symlink(path_of(cache_dir, data)));
  auto blob = load(*cache, kcoral::sha256_hex(data));
  REQUIRE(blob.has_value());
  CHECK(blob->view() == data);
  // A digest's directory that is a link: the blob is not kept, and nothing lands there.
  std::string other = "stored under a linked directory";
  std::string elsewhere = dir / "elsewhere";
  std::filesystem::create_directory(elsewhere);
  std::string prefix = prefix_path(cache_dir, other);
  std::filesystem::remove_all(prefix);
  std::filesystem::create_directory_symlink(elsewhere, prefix);
  store(*cache, other);
  CHECK(std::filesystem::is_empty(elsewhere));
  CHECK_FALSE(load(*cache, kcoral::sha256_hex(other)).has_value());
  CHECK(cache->count() == 1);
}

TEST_CASE("a FIFO under a digest's name counts as missing and is never opened") {
  kcoral::test::TempDir dir;
  auto cache = open_cache(dir.path(), 1 << 20);
  std::string data = "swapped for a FIFO";
  store(*cache, data);
  std::filesystem::remove(path_of(dir.path(), data));
  REQUIRE(::mkfifo(path_of(dir.path(), data).c_str(), 0600) == 0);
  CHECK_FALSE(load(*cache, kcoral::sha256_hex(data)).has_value());  // returns: no reader blocked on it
  CHECK(cache->count() == 0);
}

TEST_CASE("a tmp that is a link is refused, and what it points at is not emptied") {
  kcoral::test::TempDir dir;
  std::string cache_dir = dir / "cache";
  std::filesystem::create_directory(cache_dir);
  REQUIRE(::chmod(cache_dir.c_str(), 0700) == 0);
  std::string elsewhere = dir / "elsewhere";
  std::filesystem::create_directory(elsewhere);
  std::ofstream(elsewhere + "/precious") << "kept";
  std::filesystem::create_directory_symlink(elsewhere, cache_dir + "/tmp");
  CHECK(open_error(cache_dir).find("not a link") != std::string::npos);
  CHECK(read_text(elsewhere + "/precious") == "kept");
}

TEST_CASE("a tenant's blob is found by that tenant alone, across a reopen too") {
  kcoral::test::TempDir dir;
  std::string data = "alice's own bytes";
  std::string digest = kcoral::sha256_hex(data);
  {
    auto cache = open_cache(dir.path(), 1 << 20);
    store(*cache, data, "alice");
    CHECK_FALSE(load(*cache, digest, "bob").has_value());
    CHECK_FALSE(cache->size_of("bob", digest).has_value());
    CHECK(cache->size_of("alice", digest) == data.size());
  }
  auto cache = open_cache(dir.path(), 1 << 20);
  CHECK_FALSE(load(*cache, digest, "bob").has_value());
  CHECK(std::filesystem::exists(path_of(dir.path(), data, "alice")));  // bob's miss removed nothing
  auto kept = load(*cache, digest, "alice");
  REQUIRE(kept.has_value());
  CHECK(kept->view() == data);
  // Bob's upload of the same bytes is a file of his own, in his directory.
  store(*cache, data, "bob");
  CHECK(cache->count() == 2);
  CHECK(std::filesystem::exists(path_of(dir.path(), data, "bob")));
  CHECK(kcoral::DiskBlobCache::tenant_directory("alice") != kcoral::DiskBlobCache::tenant_directory("bob"));
}

TEST_CASE("blobs kept without a tenant (DIR/ab/digest) are removed at open, and served to none") {
  kcoral::test::TempDir dir;
  std::string data = "kept before tenants";
  std::string digest = kcoral::sha256_hex(data);
  std::string old_prefix = dir / digest.substr(0, 2);
  std::filesystem::create_directories(old_prefix);
  std::ofstream(old_prefix + "/" + digest) << data;
  std::string outside = dir / "outside";
  std::ofstream(outside) << "not the cache's";
  std::string linked = kcoral::sha256_hex("linked");
  std::filesystem::create_directories(dir / linked.substr(0, 2));
  std::filesystem::create_symlink(outside, dir / (linked.substr(0, 2) + "/" + linked));
  REQUIRE(::chmod(dir.path().c_str(), 0700) == 0);
  auto cache = open_cache(dir.path(), 1 << 20);
  CHECK(cache->count() == 0);
  CHECK_FALSE(load(*cache, digest, "alice").has_value());
  CHECK_FALSE(std::filesystem::exists(old_prefix));
  CHECK_FALSE(std::filesystem::exists(dir / linked.substr(0, 2)));
  CHECK(read_text(outside) == "not the cache's");  // the link went, not its target
}

TEST_CASE("a tenant's directory that is a link is neither read nor written through") {
  kcoral::test::TempDir dir;
  std::string cache_dir = dir / "cache";
  std::string data = "under a linked tenant";
  std::string elsewhere = dir / "elsewhere";
  std::filesystem::create_directories(elsewhere + "/" + kcoral::sha256_hex(data).substr(0, 2));
  std::ofstream(elsewhere + "/" + kcoral::sha256_hex(data).substr(0, 2) + "/" + kcoral::sha256_hex(data)) << data;
  {
    auto cache = open_cache(cache_dir, 1 << 20);
    std::filesystem::create_directory_symlink(elsewhere, tenant_path(cache_dir));
  }
  auto cache = open_cache(cache_dir, 1 << 20);
  CHECK(cache->count() == 0);
  CHECK_FALSE(load(*cache, kcoral::sha256_hex(data)).has_value());
  std::string other = "stored under a linked tenant";
  store(*cache, other);
  CHECK(cache->count() == 0);
  CHECK_FALSE(std::filesystem::exists(elsewhere + "/" + kcoral::sha256_hex(other).substr(0, 2)));
}

}  // TEST_SUITE
