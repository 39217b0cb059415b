// remove_tree (libkcoral/src/remove_tree.cpp): removes a program's directory tree whatever
// it holds, never following a symbolic link out of it, and restores permissions a program
// took away; a missing path is not an error.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "kcoral/remove_tree.hpp"
#include "libkcoral/temp_dir.hpp"

namespace fs = std::filesystem;

TEST_SUITE("remove_tree") {

TEST_CASE("a nested tree with files is removed entirely") {
  kcoral::test::TempDir temp;
  fs::create_directories(temp / "tree/a/b/c");
  std::ofstream(temp / "tree/a/b/c/file") << "data";
  std::ofstream(temp / "tree/top") << "data";
  kcoral::remove_tree(temp / "tree");
  CHECK_FALSE(fs::exists(temp / "tree"));
  CHECK(fs::exists(temp.path()));
}

TEST_CASE("symbolic links are removed, not followed") {
  kcoral::test::TempDir temp;
  fs::create_directories(temp / "outside");
  std::ofstream(temp / "outside/keep") << "keep";
  fs::create_directories(temp / "tree");
  fs::create_directory_symlink(temp / "outside", temp / "tree/link");
  fs::create_symlink(temp / "outside/keep", temp / "tree/file-link");
  kcoral::remove_tree(temp / "tree");
  CHECK_FALSE(fs::exists(temp / "tree"));
  CHECK(fs::exists(temp / "outside/keep"));
}

TEST_CASE("directories a program made unreadable and unwritable are removed too") {
  kcoral::test::TempDir temp;
  fs::create_directories(temp / "tree/locked/inner");
  std::ofstream(temp / "tree/locked/inner/file") << "x";
  ::chmod((temp / "tree/locked/inner").c_str(), 0);
  ::chmod((temp / "tree/locked").c_str(), 0);
  ::chmod((temp / "tree").c_str(), 0500);
  kcoral::remove_tree(temp / "tree");
  CHECK_FALSE(fs::exists(temp / "tree"));
}

TEST_CASE("removing a missing path does nothing") {
  kcoral::test::TempDir temp;
  kcoral::remove_tree(temp / "never-was");
  CHECK(fs::exists(temp.path()));
}

TEST_CASE("a path that is a file is removed") {
  kcoral::test::TempDir temp;
  std::ofstream(temp / "file") << "x";
  kcoral::remove_tree(temp / "file");
  CHECK_FALSE(fs::exists(temp / "file"));
}

}  // TEST_SUITE
