// DelayCompensation: DC-ASGD (Zheng et al., ICML 2017) on the server, for one table shard.
//
// A worker computes its gradient g at the weights it pulled, w_at_pull; by the time the push
// arrives the server's weights are w_now. DC-ASGD corrects the gradient with a diagonal
// approximation of the Hessian (the outer product of g with itself):
//   g' = g + lambda * g * g * (w_now - w_at_pull)        (element-wise)
// This class remembers, per worker, the weights the server served it at its last pull, and
// computes g' for that worker's next push of the same keys.
//
// Memory: sparse tables keep, per worker, a map key -> row as served (`dim` floats), overwritten
// by each pull of the key and released when the worker pushes that key (so it holds the rows a
// worker pulled and has not pushed yet: about one or two batches of distinct ids). Dense tables
// keep, per worker, a copy of each pulled chunk, overwritten by the next pull (never released: at
// most one copy of the shard per worker). Either way a worker's memory is capped at
// kMaxFloatsPerWorker floats (64 MiB); pulls beyond the cap are not remembered (counted).
// A pushed key with no remembered pull (never pulled by this worker, released by an earlier
// push, beyond the cap, or lost in a server restart) gets NO compensation: g' = g.
//
// Thread-safety: none; used by its TableShard under the server's work lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

namespace osprey::server {

class DelayCompensation {
 public:
  static constexpr size_t kMaxFloatsPerWorker = size_t{16} << 20;

  struct Counts {
    uint64_t compensated = 0;    // rows / chunks whose gradient was corrected
    uint64_t uncompensated = 0;  // pushed with no remembered pull
    uint64_t not_remembered = 0; // pulled rows / chunks dropped by the memory cap
  };

  // lambda > 0. `width(key)`: floats of the row / chunk `key`. `sparse`: release on push.
  DelayCompensation(float lambda, bool sparse, std::function<size_t(uint64_t)> width);

  // Remembers `values` (the n keys' floats, concatenated) as served to `worker`.
  void RecordPull(int worker, const uint64_t* keys, size_t n, const float* values);
  // Writes g' for each key into out (same layout as g). `w_now`: the keys' current weights.
  void Compensate(int worker, const uint64_t* keys, size_t n, const float* g, const float* w_now,
                  float* out);

  const Counts& counts() const { return counts_; }
  // Floats remembered for `worker` now (tests, memory accounting).
  size_t floats(int worker) const;

 private:
  struct Memory {
    std::unordered_map<uint64_t, std::vector<float>> at_pull;
    size_t floats = 0;
  };

  const float lambda_;
  const bool sparse_;
  const std::function<size_t(uint64_t)> width_;
  std::unordered_map<int, Memory> workers_;
  Counts counts_;
};

}  // namespace osprey::server
