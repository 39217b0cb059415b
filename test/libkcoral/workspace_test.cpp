// Workspace (libkcoral/src/workspace.cpp): a fresh `work` and `modules` directory per
// program, removed with the Workspace; file uploads written 0600 under 0700 parents and
// never through a symbolic link; file and folder snapshots that refuse links, special
// files (kind `serialization`) and anything over the byte budget (`response_too_large`).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "libkcoral/temp_dir.hpp"
#include "workspace.hpp"

namespace fs = std::filesystem;
using kcoral::ErrorKind;
using kcoral::Workspace;

namespace {

Workspace make(const std::string& root) {
  auto workspace = Workspace::create(root);
  REQUIRE_MESSAGE(workspace.has_value(), workspace.error().message);
  return std::move(*workspace);
}

unsigned mode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

void write(const std::string& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
}

}  // namespace

TEST_SUITE("workspace") {

TEST_CASE("a workspace makes private work and modules directories under its root") {
  kcoral::test::TempDir temp;
  Workspace workspace = make(temp / "root/nested");  // missing roots are created
  CHECK(fs::is_directory(workspace.work_dir()));
  CHECK(fs::is_directory(workspace.modules_dir()));
  CHECK(workspace.work_dir().rfind(temp / "root/nested/kcoral-", 0) == 0);
  CHECK(fs::path(workspace.work_dir()).parent_path() == fs::path(workspace.modules_dir()).parent_path());
  CHECK(mode_of(workspace.work_dir()) == 0700);
  CHECK(mode_of(workspace.modules_dir()) == 0700);
}

TEST_CASE("two workspaces under one root are different directories") {
  kcoral::test::TempDir temp;
  Workspace a = make(temp.path());
  Workspace b = make(temp.path());
  CHECK(a.work_dir() != b.work_dir());
}

TEST_CASE("destroying a workspace removes its whole tree") {
  kcoral::test::TempDir temp;
  std::string root;
  {
    Workspace workspace = make(temp.path());
    root = fs::path(workspace.work_dir()).parent_path().string();
    REQUIRE(workspace.write_file("deep/dir/file", "x").has_value());
    write(workspace.modules_dir() + "/m.py", "x = 1");
  }
  CHECK_FALSE(fs::exists(root));
}

TEST_CASE("a moved workspace is removed once, by its new owner") {
  kcoral::test::TempDir temp;
  std::optional<Workspace> moved;
  std::string work;
  {
    Workspace original = make(temp.path());
    work = original.work_dir();
    moved.emplace(std::move(original));
  }
  CHECK(fs::exists(work));
  moved.reset();
  CHECK_FALSE(fs::exists(work));
}

TEST_CASE("move-assigning over a workspace removes the one it replaced") {
  kcoral::test::TempDir temp;
  Workspace target = make(temp.path());
  const std::string replaced = target.work_dir();
  target = make(temp.path());
  CHECK(fs::exists(target.work_dir()));
  CHECK_FALSE(fs::exists(replaced));
}

TEST_CASE("write_file makes a 0600 file under 0700 parents") {
  kcoral::test::TempDir temp;
  Workspace workspace = make(temp.path());
  REQUIRE(workspace.write_file("a/b/c.bin", std::string("\0\xff", 2)).has_value());
  REQUIRE(workspace.write_file("a/sibling", "").has_value());  // parents may exist already
  const std::string file = workspace.work_dir() + "/a/b/c.bin";
  CHECK(mode_of(file) == 0600);
  CHECK(mode_of(workspace.work_dir() + "/a") == 0700);
  CHECK(mode_of(workspace.work_dir() + "/a/b") == 0700);
  CHECK(fs::file_size(file) == 2);
  CHECK(fs::file_size(workspace.work_dir() + "/a/sibling") == 0);
}

TEST_CASE("write_file never replaces an existing file") {
  kcoral::test::TempDir temp;
  Workspace workspace = make(temp.path());
  REQUIRE(workspace.write_file("f", "first").has_value());
  auto again = workspace.write_file("f", "second");
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().kind == ErrorKind::runtime);
  auto read = workspace.read_file("f", 100);
  REQUIRE(read.has_value());
  CHECK(read->data == "first");
}

TEST_CASE("write_file refuses to write through a symbolic link") {
  kcoral::test::TempDir temp;
  fs::create_directories(temp / "outside");
  Workspace workspace = make(temp / "root");
  fs::create_directory_symlink(temp / "outside", workspace.work_dir() + "/dir");
  fs::create_symlink(temp / "outside/target", workspace.work_dir() + "/leaf");
  CHECK_FALSE(workspace.write_file("dir/escape", "x").has_value());
  CHECK_FALSE(workspace.write_file("leaf", "x").has_value());
  CHECK(fs::is_empty(temp / "outside"));
  // A regular file where a directory is needed fails too.
  REQUIRE(workspace.write_file("plain", "x").has_value());
  CHECK_FALSE(workspace.write_file("plain/child", "x").has_value());
}

TEST_CASE("read_file snapshots a regular file") {
  kcoral::test::TempDir temp;
  Workspace workspace = make(temp.path());
  fs::create_directories(workspace.work_dir() + "/out");
  write(workspace.work_dir() + "/out/result.txt", "result");
  auto read = workspace.read_file("out/result.txt", 6);
  REQUIRE(read.has_value());
  CHECK(read->data == "result");
  write(workspace.work_dir() + "/empty", "");
  CHECK(workspace.read_file("empty", 0).has_value());
}

TEST_CASE("read_file refuses links, special files, directories, missing files and budget overruns") {
  kcoral::test::TempDir temp;
  Workspace workspace = make(temp.path());
  const std::string& work = workspace.work_dir();
  write(temp / "secret", "secret");
  fs::create_symlink(temp / "secret", work + "/link");
  fs::create_directories(work + "/dir");
  fs::create_directory_symlink(temp.path(), work + "/dirlink");
  REQUIRE(::mkfifo((work + "/fifo").c_str(), 0600) == 0);
  write(work + "/big", "12345");
  for (const char* path : {"link", "dir", "fifo", "missing", "dirlink/secret", "missing/child"}) {
    CAPTURE(path);
    auto read = workspace.read_file(path, 1000);
    REQUIRE_FALSE(read.has_value());
    CHECK(read.error().kind == ErrorKind::serialization);
  }
  auto over = workspace.read_file("big", 4);
  REQUIRE_FALSE(over.has_value());
  CHECK(over.error().kind == ErrorKind::response_too_large);
  CHECK(workspace.read_file("big", 5).has_value());
}

TEST_CASE("read_folder lists every file and every directory, sorted") {
  kcoral::test::TempDir temp;
  Workspace workspace = make(temp.path());
  for (const char* path : {"out/b.txt", "out/a/z.txt", "out/a/deeper/x", "out/c-d/y"})
    REQUIRE(workspace.write_file(path, path).has_value());
  fs::create_directories(workspace.work_dir() + "/out/empty/inner");
  auto folder = workspace.read_folder("out", 1000);
  REQUIRE_MESSAGE(folder.has_value(), folder.error().message);
  std::vector<std::pair<std::string, std::string>> expected_files{
      {"a/deeper/x", "out/a/deeper/x"}, {"a/z.txt", "out/a/z.txt"}, {"b.txt", "out/b.txt"}, {"c-d/y", "out/c-d/y"}};
  CHECK(folder->files == expected_files);
  CHECK(folder->directories == std::vector<std::string>{"a", "a/deeper", "c-d", "empty", "empty/inner"});
}

TEST_CASE("read_folder of the whole workspace and of an empty folder") {
  kcoral::test::TempDir temp;
  Workspace workspace = make(temp.path());
  fs::create_directories(workspace.work_dir() + "/nothing");
  auto empty = workspace.read_folder("nothing", 0);
  REQUIRE(empty.has_value());
  CHECK(empty->files.empty());
  CHECK(empty->directories.empty());
}

TEST_CASE("read_folder refuses links and special files anywhere inside, and budget overruns") {
  kcoral::test::TempDir temp;
  Workspace workspace = make(temp / "root");
  const std::string& work = workspace.work_dir();
  REQUIRE(workspace.write_file("with-link/sub/ok", "ok").has_value());
  fs::create_symlink(temp.path(), work + "/with-link/sub/link");
  REQUIRE(workspace.write_file("with-fifo/ok", "ok").has_value());
  REQUIRE(::mkfifo((work + "/with-fifo/fifo").c_str(), 0600) == 0);
  REQUIRE(workspace.write_file("sized/a", "123").has_value());
  REQUIRE(workspace.write_file("sized/b", "456").has_value());
  fs::create_directory_symlink(work + "/sized", work + "/folder-link");
  for (const char* path : {"with-link", "with-fifo", "folder-link", "missing", "sized/a"}) {
    CAPTURE(path);
    auto folder = workspace.read_folder(path, 1000);
    REQUIRE_FALSE(folder.has_value());
    CHECK(folder.error().kind == ErrorKind::serialization);
  }
  // The budget covers all files together.
  CHECK(workspace.read_folder("sized", 6).has_value());
  auto over = workspace.read_folder("sized", 5);
  REQUIRE_FALSE(over.has_value());
  CHECK(over.error().kind == ErrorKind::response_too_large);
}

}  // TEST_SUITE
