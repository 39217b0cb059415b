// RemoteLease: a worker's GPU lease, held by the front on its behalf.
//
// acquire() asks the front over the worker's channel and blocks until the front grants
// it; release() tells the front. If the worker dies, the front takes the lease back
// itself. One per worker process; used from the thread that runs programs.
#pragma once

#include <string>

#include "channel.hpp"
#include "kcoral/gpu_lease.hpp"

namespace kcoral {

class RemoteLease final : public GpuLease {
 public:
  // `message_type` is "lease" for programs, "init_lease" for making a CUDA context.
  RemoteLease(const Channel& channel, std::string message_type)
      : channel_(channel), message_type_(std::move(message_type)) {}
  ~RemoteLease() override { release(); }

  Status acquire() override;
  void release() override;
  bool held() const override { return held_; }
  bool has_gpu() const override { return true; }

 private:
  const Channel& channel_;
  std::string message_type_;
  bool held_ = false;
};

}  // namespace kcoral
