// Workspace: the fresh directory a program runs in, and the only place its file uploads
// go and its file/folder returns come from.
//
// Layout: `<root>/kcoral-XXXXXX/work` is the working directory; `.../modules` holds the
// source of uploaded modules, outside the program's view of `.`. Every path is opened
// component by component without following symbolic links, so a program cannot make a
// return read, or an upload write, outside `work`. The whole tree is removed when the
// Workspace is destroyed. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kcoral/error.hpp"
#include "kcoral/remove_tree.hpp"
#include "kcoral/unique_fd.hpp"

namespace kcoral {

struct FileSnapshot {
  std::string data;
};

struct FolderSnapshot {
  std::vector<std::pair<std::string, std::string>> files;  // relative path -> bytes, sorted
  std::vector<std::string> directories;                    // every subdirectory, sorted
};

class Workspace {
 public:
  [[nodiscard]] static Result<Workspace> create(const std::string& root);
  Workspace(Workspace&& other) noexcept;
  Workspace& operator=(Workspace&& other) noexcept;
  ~Workspace();

  [[nodiscard]] const std::string& work_dir() const { return work_dir_; }
  [[nodiscard]] const std::string& modules_dir() const { return modules_dir_; }

  // Writes a new regular file (0600; missing parents 0700) at a canonical relative path.
  [[nodiscard]] Status write_file(std::string_view path, std::string_view data);
  // Snapshots of a canonical relative path, failing with `serialization` on symbolic
  // links, special files, files that change while read, or more than `budget_bytes`.
  [[nodiscard]] Result<FileSnapshot> read_file(std::string_view path, std::uint64_t budget_bytes);
  [[nodiscard]] Result<FolderSnapshot> read_folder(std::string_view path, std::uint64_t budget_bytes);

 private:
  Workspace() = default;
  std::string root_;
  std::string work_dir_;
  std::string modules_dir_;
};

}  // namespace kcoral
