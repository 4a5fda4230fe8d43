// CPU top-k selection by magnitude: exact (std::nth_element), radix/histogram (the digit rule of
// select_rule.h), and sampled threshold (DGC). Each returns a Selection, a rule that picks the
// elements; the CUDA kernels in worker/cuda implement the same rules, and these functions are
// their reference: for the same input both select the same index set.
//
// Thread-safety: pure functions; scratch vectors are the caller's and must not be shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/codec/select_rule.h"

namespace osprey::codec {

// k = clamp(round(density * n), 1, n); k_lo = k - floor(k * tolerance) (at least 1),
// k_hi = min(n, k + floor(k * tolerance)). Precondition: n > 0, density in (0, 1].
SelectTargets MakeTargets(size_t n, double density, double tolerance);

// Selects element (key, index) iff key >= window_lo and (key > key_threshold or
// (key == key_threshold and index <= tie_index)).
struct Selection {
  uint32_t window_lo = 0;
  uint32_t key = 0;
  uint32_t tie_index = UINT32_MAX;
  uint64_t count = 0;  // elements the rule selects

  bool Selects(uint32_t k, uint32_t index) const {
    return k >= window_lo && (k > key || (k == key && index <= tie_index));
  }
};

// Exactly min(k, n) elements: the k largest |x|, ties at the k-th magnitude to the lowest indices.
// Uses std::nth_element on a copy of the keys (in *scratch).
Selection SelectExact(const float* x, size_t n, uint64_t k, std::vector<uint32_t>* scratch);

// Radix/histogram selection (select_rule.h) over elements (keys[i], indices[i]) whose key is
// >= window_lo; `indices` may be null, meaning index == position. With t.k_lo == t.k_hi == t.k it
// is exact. If fewer than t.k keys are in the window, selects all of them.
Selection RadixSelect(const uint32_t* keys, const uint32_t* indices, size_t m, uint32_t window_lo,
                      const SelectTargets& t);

// Sampled threshold plan: how many stratified draws and which rank of the sorted sample is the
// first threshold. The rank aims a little above k (by the tolerance and three standard
// deviations of the sample quantile) so one pass usually collects at least k candidates.
struct SamplePlan {
  uint64_t samples = 0;
  uint64_t rank = 0;  // 1-based, in [1, samples]
};
SamplePlan MakeSamplePlan(size_t n, const SelectTargets& t, double sample_rate, double tolerance);

// Scratch for SelectSampled, reused across calls.
struct SampleScratch {
  std::vector<uint32_t> sample_keys;
  std::vector<uint32_t> cand_keys;
  std::vector<uint32_t> cand_indices;
};

// DGC sampled selection: draw plan.samples stratified positions (StratifiedPosition with `seed`),
// take the rank-th largest sampled key as the window, collect candidates >= window, lower the
// window from the sample up to kMaxExtraPasses times while fewer than t.k_lo were found (the last
// time to 0), then RadixSelect among the candidates.
Selection SelectSampled(const float* x, size_t n, const SelectTargets& t, const SamplePlan& plan, uint64_t seed,
                        SampleScratch* scratch);

}  // namespace osprey::codec
