// cuda_hazard: whether this process has touched CUDA, which makes forking it unsafe for
// its children: a CUDA context, and the driver's state behind its device files, do not
// survive a fork (a child that touches them fails or hangs). So a process that forks a
// child per program must never have opened a CUDA device; cuInit opens /dev/nvidiactl.
//
//   if (auto hazard = kcoral::cuda_hazard()) ...  // e.g. "opened /dev/nvidiactl"
#pragma once

#include <optional>
#include <string>

namespace kcoral {

[[nodiscard]] std::optional<std::string> cuda_hazard();

}  // namespace kcoral
