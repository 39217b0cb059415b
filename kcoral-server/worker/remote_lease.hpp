// RemoteLease: a worker's GPU lease, held by the front on its behalf.
//
// acquire() asks the front through the courier and blocks until the front grants it;
// release() tells the front. If the worker dies, the front takes the lease back itself.
// One per worker process; used from the thread that runs programs.
#pragma once

#include "courier.hpp"
#include "kcoral/gpu_lease.hpp"

namespace kcoral {

class RemoteLease final : public GpuLease {
 public:
  enum class Kind { program, init };  // the program lease, or a turn to make a CUDA context
  RemoteLease(Courier& courier, Kind kind) : courier_(courier), kind_(kind) {}
  ~RemoteLease() override { release(); }

  Status acquire() override;
  void release() override;
  bool held() const override { return held_; }
  bool has_gpu() const override { return true; }

 private:
  [[nodiscard]] Status ask(bool acquire);

  Courier& courier_;
  Kind kind_;
  bool held_ = false;
};

}  // namespace kcoral
