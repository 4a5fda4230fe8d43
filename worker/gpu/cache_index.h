// CacheIndex: where the GPU loop's hot-row cache decides which slot holds which key and what to
// pull (worker.cache.index). Private to the GPU loop (it includes the CUDA runtime API).
//
//   device (default)  cuda::DeviceRowCache: the index lives on the GPU, the step's deduped keys
//                     never cross to the host for planning; only the miss keys do (one count
//                     copy, then the keys). Set-associative, see worker/cache/set_assoc_row_cache.h.
//   host              ShardedRowCache: the deduped keys are planned on worker.plan_threads host
//                     threads (worker/cache/sharded_row_cache.h), slots copied to the device.
//
// Either way, after Plan(in) on `stream` has returned OK (the stream synchronized):
// in->d_slots[0, num_unique) hold the slot of each key, in->d_miss_slots[0, num_misses) the
// slots to fill, and in->miss_key_ptr[0, num_misses) the keys to pull, on the host. Both keep
// the loop's semantics: a row pulled for step p serves step t while t - p <= staleness_bound, the
// slots of the ring's steps in flight are never reused, and bound 0 re-pulls every row each step
// (the uncached run, bit for bit). The row array has slot_count() rows.
//
// Thread-safety: the planner thread's (Plan, Reset); stats() after Run has joined it.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/cache/row_cache.h"
#include "worker/gpu/gpu_options.h"
#include "worker/gpu/step_buffers.h"

namespace osprey::worker::gpu {

class CacheIndex {
 public:
  // The index opt.cache_index names, empty. Errors: its Make's (InvalidArgument naming the
  // option, ResourceExhausted for memory or threads).
  static StatusOr<std::unique_ptr<CacheIndex>> Make(const GpuOptions& opt);
  virtual ~CacheIndex() = default;

  // Plans step in->step for in->num_unique keys (in->d_unique on the device, in->h_unique on the
  // host; both valid, grouped by server with in->d_server_counts when servers > 1), see above;
  // the device index then also sets in->miss_server_counts. Synchronizes `stream`.
  virtual Status Plan(StepInput* in, int servers, cudaStream_t stream) = 0;
  // Forgets every key (the rows are from before a rollback or a new shard map); counters stay.
  virtual Status Reset(cudaStream_t stream) = 0;
  virtual RowCacheStats stats() const = 0;
  virtual uint64_t slot_count() const = 0;
  // For the start-up log line, e.g. "device index, 1000 sets of 32 ways".
  virtual std::string Describe() const = 0;
};

}  // namespace osprey::worker::gpu
