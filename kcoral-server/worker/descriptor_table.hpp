// Closing all of a descriptor table but a few: what a process about to run a program keeps
// of what it inherited.
#pragma once

#include <vector>

namespace kcoral {

// Closes every descriptor of this thread's table from `from` up, except those in `keep`
// (in any order; those below `from` are ignored). With close_range(2): no loop over
// descriptor numbers, however high the limit.
void close_descriptors_except(std::vector<int> keep, int from = 0);

}  // namespace kcoral
