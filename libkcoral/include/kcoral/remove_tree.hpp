// Removing a program's directory tree, whatever the program did to it.
#pragma once

#include <string>

namespace kcoral {

// Removes a directory tree without following symbolic links, restoring owner permissions
// where a program took them away. Best effort: failures are ignored.
void remove_tree(const std::string& path);

}  // namespace kcoral
