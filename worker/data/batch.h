// Batch: the unit of training data that readers and generators produce and models consume, and
// the key helpers that turn a batch's raw ids into parameter-server keys.
//
// Thread-safety: Batch is a plain value. The free functions are pure and may run concurrently on
// distinct outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace osprey::data {

// `size` samples with `num_dense` float features and `num_sparse` categorical features each.
// Producers resize the vectors, so one Batch object can be reused across calls without
// reallocating.
struct Batch {
  int size = 0;
  int num_dense = 0;
  int num_sparse = 0;
  std::vector<float> dense;        // size * num_dense, row-major (sample-major)
  std::vector<uint64_t> ids;       // size * num_sparse, raw per-feature ids (not yet FeatureKeys)
  std::vector<float> labels;       // size, 0 or 1
  std::vector<float> oracle_prob;  // size: true P(y = 1) when known (synthetic data), else empty
};

// Returns OK when the vector sizes agree with size/num_dense/num_sparse, else InvalidArgument
// naming the field that disagrees.
Status CheckBatchShape(const Batch& batch);

// Key space layout: the feature index sits in the top 16 bits, the id's low 48 bits below it.
inline constexpr int kFeatureKeyShift = 48;
inline constexpr uint64_t kFeatureIdMask = (uint64_t{1} << kFeatureKeyShift) - 1;
inline constexpr int kMaxSparseFeatures = 1 << (64 - kFeatureKeyShift);  // 65536

// Namespaces a raw id of sparse feature `feature` into the single global u64 key space of the
// sparse table: (feature << 48) ^ (id & 0xFFFFFFFFFFFF). The same raw id in two features gives two
// keys; ids that differ only above bit 47 collide (Criteo's 32-bit hashes never do).
// Precondition: 0 <= feature < kMaxSparseFeatures.
inline uint64_t FeatureKey(int feature, uint64_t id) {
  return (static_cast<uint64_t>(feature) << kFeatureKeyShift) ^ (id & kFeatureIdMask);
}

// Collects the distinct FeatureKeys of `batch` in order of first appearance (sample-major, then
// feature) into *unique_keys, and sets (*row_index)[b * num_sparse + f] to the position in
// *unique_keys of sample b / feature f's key. Both outputs are overwritten. Expected O(size *
// num_sparse) time (open-addressing hash table sized up-front).
// Preconditions: CheckBatchShape(batch).ok() and size * num_sparse < 2^31.
void DedupeKeys(const Batch& batch, std::vector<uint64_t>* unique_keys, std::vector<int32_t>* row_index);

}  // namespace osprey::data
