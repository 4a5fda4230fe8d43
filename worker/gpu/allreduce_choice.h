// Which path a host group's dense reduce takes for a message of a given size (worker.host_allreduce,
// issue 19): NCCL (reduce to the chunk owners), or the CUDA IPC allreduce
// (worker/cuda/ipc/ipc_allreduce.h). `nccl` and `ipc` fix it; `auto` picks per size from a
// calibration sweep measured at start-up on every rank (the host group agrees on the slowest
// rank's times first, so every rank picks alike): the faster path at the nearest measured size,
// in log scale. Pure host code: CPU tests in tests/worker/allreduce_choice_test.cc.
//
// Thread-safety: a value, read-only once made.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"

namespace osprey::worker::gpu {

enum class AllreducePath { kNccl, kIpc };

// One calibration point: median microseconds per call of each path for `bytes`.
struct AllreduceTiming {
  size_t bytes = 0;
  double nccl_us = 0, ipc_us = 0;
};

class AllreduceChoice {
 public:
  // The choice worker.host_allreduce names: "nccl" or "ipc" (every size), or "auto", which needs
  // timings (FromTimings). Errors: InvalidArgument naming the value.
  static StatusOr<AllreduceChoice> Fixed(const std::string& mode);
  // `auto`: per calibrated size, the faster path. Errors: InvalidArgument for no timings, a
  // size of 0, sizes not strictly increasing, or a time that is not a positive number.
  static StatusOr<AllreduceChoice> FromTimings(std::vector<AllreduceTiming> timings);

  AllreduceChoice() = default;  // NCCL for every size

  AllreducePath For(size_t bytes) const;
  bool uses_ipc() const;  // some size takes the IPC path
  // "nccl", "ipc", or the auto table: "64 KiB ipc 12.1 us (nccl 20.3), ..., 64 MiB nccl ...".
  std::string Describe() const;
  const std::vector<AllreduceTiming>& timings() const { return timings_; }

 private:
  AllreducePath fixed_ = AllreducePath::kNccl;
  std::vector<AllreduceTiming> timings_;  // empty: fixed_
};

// The sizes `auto` calibrates up to max_bytes: 64 KiB, x4 each step, and max_bytes itself.
std::vector<size_t> CalibrationSizes(size_t max_bytes);

}  // namespace osprey::worker::gpu
