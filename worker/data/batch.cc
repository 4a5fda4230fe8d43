#include "worker/data/batch.h"

#include <string>

#include "worker/data/random.h"

namespace osprey::data {

Status CheckBatchShape(const Batch& batch) {
  if (batch.size < 0 || batch.num_dense < 0 || batch.num_sparse < 0) {
    return InvalidArgument("batch: size, num_dense and num_sparse must be >= 0, got " +
                           std::to_string(batch.size) + ", " + std::to_string(batch.num_dense) + ", " +
                           std::to_string(batch.num_sparse));
  }
  if (batch.num_sparse > kMaxSparseFeatures) {
    return InvalidArgument("batch: num_sparse " + std::to_string(batch.num_sparse) + " exceeds the key space limit " +
                           std::to_string(kMaxSparseFeatures));
  }
  const size_t n = static_cast<size_t>(batch.size);
  auto check = [](const char* field, size_t got, size_t want) {
    if (got == want) return Status::OK();
    return InvalidArgument("batch: " + std::string(field) + " has " + std::to_string(got) + " elements, expected " +
                           std::to_string(want));
  };
  OSPREY_RETURN_IF_ERROR(check("dense", batch.dense.size(), n * batch.num_dense));
  OSPREY_RETURN_IF_ERROR(check("ids", batch.ids.size(), n * batch.num_sparse));
  OSPREY_RETURN_IF_ERROR(check("labels", batch.labels.size(), n));
  if (!batch.oracle_prob.empty()) OSPREY_RETURN_IF_ERROR(check("oracle_prob", batch.oracle_prob.size(), n));
  return Status::OK();
}

void DedupeKeys(const Batch& batch, std::vector<uint64_t>* unique_keys, std::vector<int32_t>* row_index) {
  const size_t n = static_cast<size_t>(batch.size) * static_cast<size_t>(batch.num_sparse);
  unique_keys->clear();
  row_index->resize(n);
  if (n == 0) return;
  unique_keys->reserve(n);

  // Open addressing with linear probing at load factor <= 1/2. Slots hold positions in
  // *unique_keys (-1 = empty), so the table itself is 4 bytes per slot and keys are compared in
  // the dense output array. Fibonacci hashing takes the top bits of key * golden, which mixes the
  // feature bits (top) and the id bits (bottom) alike.
  int log2_slots = 1;
  while ((size_t{1} << log2_slots) < 2 * n) ++log2_slots;
  const size_t mask = (size_t{1} << log2_slots) - 1;
  std::vector<int32_t> slots(mask + 1, -1);

  const int num_sparse = batch.num_sparse;
  const uint64_t* ids = batch.ids.data();
  int32_t* out_index = row_index->data();
  for (size_t i = 0; i < n; i += num_sparse) {
    for (int f = 0; f < num_sparse; ++f) {
      const uint64_t key = FeatureKey(f, ids[i + f]);
      size_t slot = static_cast<size_t>((key * kGoldenGamma) >> (64 - log2_slots));
      for (;;) {
        const int32_t pos = slots[slot];
        if (pos < 0) {
          const auto new_pos = static_cast<int32_t>(unique_keys->size());
          slots[slot] = new_pos;
          unique_keys->push_back(key);
          out_index[i + f] = new_pos;
          break;
        }
        if ((*unique_keys)[pos] == key) {
          out_index[i + f] = pos;
          break;
        }
        slot = (slot + 1) & mask;
      }
    }
  }
}

}  // namespace osprey::data
