// GpuLease: the executor's view of exclusive GPU access.
//
// The executor takes the lease lazily before the first instruction that needs the GPU and
// drops it around file uploads, file/folder returns and cpu_only runs (docs/protocol.md,
// "Lease placement"). Where the lease comes from is the implementation's business: the
// server's front over a socket (worker processes), a LeaseManager of the embedding
// program's own (docs/cpp-api.md shows such an adapter), or nowhere at all on a CPU-only
// executor (NoGpuLease). Used from one thread.
#pragma once

#include "kcoral/error.hpp"

namespace kcoral {

class GpuLease {
 public:
  virtual ~GpuLease() = default;
  // Blocks until the lease is held; returns at once when it already is.
  [[nodiscard]] virtual Status acquire() = 0;
  // Gives the lease up; does nothing when it is not held.
  virtual void release() = 0;
  [[nodiscard]] virtual bool held() const = 0;
  // Whether there is a GPU behind this lease at all.
  [[nodiscard]] virtual bool has_gpu() const = 0;
};

// The lease of a CPU-only executor: there is no GPU to grant, so nothing is ever held and
// no time is spent waiting.
class NoGpuLease final : public GpuLease {
 public:
  Status acquire() override { return {}; }
  void release() override {}
  bool held() const override { return false; }
  bool has_gpu() const override { return false; }
};

}  // namespace kcoral
