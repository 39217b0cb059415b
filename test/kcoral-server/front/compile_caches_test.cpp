// The compile caches' eviction (kcoral-server/front/compile_caches.cpp), on a directory
// the test writes: entries (each top-level directory's children, and top-level files) go
// least recently used first until the usage is under the target, entries used lately stay,
// links are removed and never followed (what they point at survives), a tree deeper than
// the walk holds descriptors for goes whole with few descriptors, so do 50,000 entries of
// one directory (oldest first), and reading the tree for its times touches no access
// time. An entry dated in the future goes first, and an eviction reads and removes no more
// entries than it is given. The mounts themselves need root and a kernel with idmapped tmpfs mounts:
// test/python/e2e/test_e2e_compile_cache.py runs them for real.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "compile_caches.hpp"
#include "kcoral/unique_fd.hpp"
#include "libkcoral/temp_dir.hpp"

namespace fs = std::filesystem;
using kcoral::CacheUsage;
using kcoral::UniqueFd;

namespace {

constexpr std::int64_t kNow = 2'000'000'000;

void write_file(const std::string& path, std::size_t bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << std::string(bytes, 'x');
}

// Sets a file's (or link's) access and change times to `seconds`.
void set_times(const std::string& path, std::int64_t seconds) {
  timespec times[2] = {{seconds, 0}, {seconds, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
}

// An entry: the directory `path` holding a file x of 1000 bytes, both last used at `seconds`.
void make_entry(const std::string& path, std::int64_t seconds) {
  write_file(path + "/x", 1000);
  set_times(path + "/x", seconds);
  set_times(path, seconds);
}

// What the test's files hold: regular files' bytes, and every inode below `root`.
CacheUsage usage_of(const std::string& root) {
  CacheUsage usage;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    ++usage.inodes;
    if (entry.is_symlink()) continue;
    std::error_code ec;
    if (entry.is_regular_file(ec)) usage.bytes += entry.file_size();
  }
  return usage;
}

std::size_t evict(const std::string& root, std::uint64_t target_bytes, std::int64_t keep_newer_than = 30) {
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(fd);
  return kcoral::evict_least_recent(fd.get(), target_bytes, ~std::uint64_t{0}, [&] { return usage_of(root); }, kNow,
                                    keep_newer_than);
}

std::size_t open_descriptors() {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator()));
}

}  // namespace

TEST_SUITE("compile_caches") {

TEST_CASE("entries go least recently used first, until the usage is under the target") {
  kcoral::test::TempDir dir;
  const std::string root = dir / "cache";
  write_file(root + "/triton/old/kernel.cubin", 1000);
  write_file(root + "/triton/middle/kernel.cubin", 1000);
  write_file(root + "/tvm-ffi/new/lib.so", 1000);
  write_file(root + "/tirx_old.so", 1000);  // a top-level file is an entry of its own
  set_times(root + "/tirx_old.so", kNow - 5000);
  set_times(root + "/triton/old/kernel.cubin", kNow - 4000);
  set_times(root + "/triton/old", kNow - 4000);
  set_times(root + "/triton/middle/kernel.cubin", kNow - 3000);
  set_times(root + "/triton/middle", kNow - 3000);
  set_times(root + "/tvm-ffi/new/lib.so", kNow - 100);
  set_times(root + "/tvm-ffi/new", kNow - 100);
  // A file used lately makes its whole entry recent, whatever its directory's times.
  set_times(root + "/triton/middle", kNow - 9000);
  set_times(root + "/triton/middle/kernel.cubin", kNow - 1000);

  CHECK(evict(root, 2000) == 2);
  CHECK(!fs::exists(root + "/tirx_old.so"));
  CHECK(!fs::exists(root + "/triton/old"));
  CHECK(fs::exists(root + "/triton/middle/kernel.cubin"));
  CHECK(fs::exists(root + "/tvm-ffi/new/lib.so"));
  CHECK(fs::exists(root + "/triton"));  // the tools' own directories stay
  CHECK(evict(root, 2000) == 0);        // under the target: nothing more
}

TEST_CASE("entries used within the last seconds stay, even over the target") {
  kcoral::test::TempDir dir;
  const std::string root = dir / "cache";
  make_entry(root + "/triton/a", kNow - 1000);
  make_entry(root + "/triton/b", kNow - 10);
  CHECK(evict(root, 0) == 1);
  CHECK(!fs::exists(root + "/triton/a"));
  CHECK(fs::exists(root + "/triton/b/x"));
}

TEST_CASE("an entry dated over a minute ahead counts as the oldest: no date keeps an entry") {
  kcoral::test::TempDir dir;
  const std::string root = dir / "cache";
  make_entry(root + "/triton/old", kNow - 1000);
  make_entry(root + "/triton/pinned", kNow + 10 * 365 * 86400);
  make_entry(root + "/triton/new", kNow + 30);  // a clock's tick ahead: recent, not old
  CHECK(evict(root, 2000) == 1);
  CHECK(!fs::exists(root + "/triton/pinned"));
  CHECK(fs::exists(root + "/triton/old/x"));
  CHECK(fs::exists(root + "/triton/new/x"));
}

TEST_CASE("an eviction reads and removes at most the entries it is given, however large the tree") {
  kcoral::test::TempDir dir;
  const std::string root = dir / "cache";
  for (int i = 0; i < 1000; ++i) write_file(root + "/triton/" + std::to_string(i), 1);
  for (const auto& entry : fs::directory_iterator(root + "/triton")) set_times(entry.path(), kNow - 1000);
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(fd);
  // 100 to read (the top-level directory, then 99 of its entries), 100 to remove.
  std::size_t removed =
      kcoral::evict_least_recent(fd.get(), 0, 0, [&] { return usage_of(root); }, kNow, 30, /*max_entries=*/200);
  CHECK(removed == 99);
  CHECK(usage_of(root).bytes == 1000 - 99);
  // Unbounded, the same tree goes whole.
  CHECK(kcoral::evict_least_recent(fd.get(), 0, 0, [&] { return usage_of(root); }, kNow, 30) == 1000 - 99);
}

TEST_CASE("links are removed as links: what they point at survives") {
  kcoral::test::TempDir dir;
  const std::string root = dir / "cache", outside = dir / "outside";
  write_file(outside + "/canary", 10);
  write_file(outside + "/deeper/canary", 10);
  write_file(root + "/triton/entry/x", 1000);
  fs::create_directory_symlink(outside, root + "/triton/entry/link");  // inside an entry
  fs::create_directory_symlink(outside, root + "/triton/link");        // an entry itself
  fs::create_directory_symlink(outside, root + "/link");               // a top-level one
  for (const char* path : {"/triton/entry/x", "/triton/entry/link", "/triton/entry", "/triton/link", "/link"})
    set_times(root + path, kNow - 1000);
  evict(root, 0);
  CHECK(!fs::exists(fs::symlink_status(root + "/triton/entry")));
  CHECK(!fs::exists(fs::symlink_status(root + "/triton/link")));
  CHECK(!fs::exists(fs::symlink_status(root + "/link")));
  CHECK(fs::exists(outside + "/canary"));
  CHECK(fs::exists(outside + "/deeper/canary"));
}

TEST_CASE("a tree deeper than the walk holds descriptors for goes whole, with few descriptors") {
  kcoral::test::TempDir dir;
  const std::string root = dir / "cache";
  std::string deep = root + "/triton/deep";
  fs::create_directories(deep);
  UniqueFd at(::open(deep.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  for (int level = 0; level < 300; ++level) {  // past PATH_MAX: made relative to each level
    REQUIRE(::mkdirat(at.get(), "d", 0755) == 0);
    UniqueFd fd(::openat(at.get(), "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    REQUIRE(fd);
    if (level % 50 == 0) {
      UniqueFd file(::openat(fd.get(), "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
      REQUIRE(::write(file.get(), "xxxx", 4) == 4);
    }
    at = std::move(fd);
  }
  at.reset();
  set_times(deep, kNow - 1000);
  std::size_t before = open_descriptors();
  CHECK(evict(root, 0) == 1);
  CHECK(open_descriptors() == before);
  CHECK(!fs::exists(deep));
  CHECK(fs::is_empty(root + "/triton"));  // no part cut off and left behind
}

TEST_CASE("50,000 entries in one directory: the oldest go, in order, with few descriptors") {
  kcoral::test::TempDir dir;
  const std::string root = dir / "cache";
  const std::string triton = root + "/triton";
  fs::create_directories(triton);
  UniqueFd at(::open(triton.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  constexpr int kEntries = 50'000;
  for (int i = 0; i < kEntries; ++i) {
    std::string name = std::to_string(i);
    UniqueFd file(::openat(at.get(), name.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    REQUIRE(::write(file.get(), "x", 1) == 1);
    timespec times[2] = {{kNow - 100'000 + i, 0}, {kNow - 100'000 + i, 0}};  // entry i used i s later
    REQUIRE(::futimens(file.get(), times) == 0);
  }
  // Over the target while the newest of the older half is there (walking 50,000 entries
  // after each removal would take the test minutes): removing in any other order than
  // oldest first removes newer entries too, which the checks below see.
  const std::string boundary = triton + "/" + std::to_string(kEntries / 2 - 1);
  auto usage = [&] { return CacheUsage{fs::exists(boundary) ? std::uint64_t{kEntries} : kEntries / 2, 0}; };
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::size_t before = open_descriptors();
  CHECK(kcoral::evict_least_recent(fd.get(), kEntries / 2, ~std::uint64_t{0}, usage, kNow, 30) == kEntries / 2);
  CHECK(open_descriptors() == before);
  CHECK(!fs::exists(triton + "/0"));
  CHECK(!fs::exists(triton + "/" + std::to_string(kEntries / 2 - 1)));
  CHECK(fs::exists(triton + "/" + std::to_string(kEntries / 2)));
  CHECK(fs::exists(triton + "/" + std::to_string(kEntries - 1)));
}

TEST_CASE("reading the tree for its times leaves the access times as they were") {
  kcoral::test::TempDir dir;
  const std::string root = dir / "cache";
  write_file(root + "/triton/a/sub/x", 1000);
  write_file(root + "/triton/b/x", 1000);
  for (const char* path : {"/triton/a/sub/x", "/triton/a/sub", "/triton/a", "/triton/b/x", "/triton/b"})
    set_times(root + path, kNow - 1000);
  // Over the target (by a usage that reads nothing itself) with everything recent by
  // `keep_newer_than`: the tree is read, nothing removed.
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(fd);
  CHECK(kcoral::evict_least_recent(fd.get(), 0, 0, [] { return CacheUsage{1, 1}; }, kNow, kNow) == 0);
  struct stat info {};
  REQUIRE(::stat((root + "/triton/a/sub").c_str(), &info) == 0);
  CHECK(info.st_atime == kNow - 1000);
  REQUIRE(::stat((root + "/triton/a").c_str(), &info) == 0);
  CHECK(info.st_atime == kNow - 1000);
}

}  // TEST_SUITE
