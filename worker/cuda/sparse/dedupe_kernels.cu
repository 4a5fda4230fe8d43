// DedupeFeatureKeys: keys + positions, one radix sort of the pairs, then one scan whose input is
// the segment-head flag (computed on the fly from the sorted keys) and whose output functor
// scatters the unique keys and row_index. Besides the sort: one key kernel and one scan; no
// intermediate flag or scan arrays, no host synchronization.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <string>

#include "worker/cuda/sparse/sparse_check.cuh"
#include "worker/cuda/sparse/sparse_kernels.h"
#include "worker/data/batch.h"

namespace osprey::cuda {
namespace {

constexpr int kThreads = 256;
// cudaMalloc's alignment; CUB's temporary storage wants it, and it keeps every array coalesced.
constexpr size_t kAlign = 256;
constexpr int kShift = data::kFeatureKeyShift;
constexpr uint64_t kIdMask = data::kFeatureIdMask;

__global__ void MakeKeysKernel(const uint64_t* __restrict__ ids, int n, int num_sparse, uint64_t* __restrict__ keys,
                               int32_t* __restrict__ pos) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint64_t feature = static_cast<uint64_t>(i % num_sparse);
  keys[i] = (feature << kShift) ^ (ids[i] & kIdMask);
  pos[i] = i;
}

// 1 where sorted position i starts a run of equal keys.
struct HeadFlag {
  const uint64_t* keys;
  __device__ int32_t operator()(int32_t i) const { return (i == 0 || keys[i] != keys[i - 1]) ? 1 : 0; }
};

// Receives the inclusive count of heads up to sorted position i: that entry's unique index + 1.
struct ScatterUnique {
  const uint64_t* keys;
  const int32_t* pos;
  uint64_t* unique_keys;
  int32_t* row_index;
  int32_t* num_unique;
  ptrdiff_t last;
  __device__ void operator()(ptrdiff_t i, int32_t count) const {
    const int32_t u = count - 1;
    const uint64_t key = keys[i];
    if (i == 0 || key != keys[i - 1]) unique_keys[u] = key;
    row_index[pos[i]] = u;
    if (i == last) *num_unique = count;
  }
};

using FlagIterator = thrust::transform_iterator<HeadFlag, thrust::counting_iterator<int32_t>>;
using ScatterIterator = thrust::tabulate_output_iterator<ScatterUnique>;

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Sort bits: the id's 48 bits plus enough for the largest feature index. Device time is mostly
// one onesweep pass per 8 bits (7 for 26 features), each bound by a tile's latency rather than by
// bandwidth at these sizes, so every bit not sorted counts.
int EndBit(int num_sparse) {
  int bits = 0;
  while (bits < 16 && (1 << bits) < num_sparse) ++bits;
  return kShift + bits;
}

// Where each array sits in the workspace for n ids (offsets from the 256-aligned base).
struct Layout {
  size_t keys[2] = {0, 0};
  size_t pos[2] = {0, 0};
  size_t temp = 0;
  size_t temp_bytes = 0;
  size_t total = 0;  // including kAlign of slack for an unaligned base
};

Status ComputeLayout(int n, int end_bit, Layout* out) {
  Layout l;
  size_t sort_bytes = 0, scan_bytes = 0;
  cub::DoubleBuffer<uint64_t> keys(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> pos(nullptr, nullptr);
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(
      cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys, pos, n, 0, end_bit, cudaStream_t{nullptr}));
  FlagIterator flags(thrust::counting_iterator<int32_t>(0), HeadFlag{nullptr});
  ScatterIterator scatter(ScatterUnique{});
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(
      cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, flags, scatter, n, cudaStream_t{nullptr}));
  size_t offset = 0;
  for (int b = 0; b < 2; ++b) {
    l.keys[b] = offset;
    offset += AlignUp(sizeof(uint64_t) * static_cast<size_t>(n));
  }
  for (int b = 0; b < 2; ++b) {
    l.pos[b] = offset;
    offset += AlignUp(sizeof(int32_t) * static_cast<size_t>(n));
  }
  l.temp = offset;
  l.temp_bytes = AlignUp(sort_bytes > scan_bytes ? sort_bytes : scan_bytes);
  l.total = kAlign + offset + l.temp_bytes;
  *out = l;
  return Status();
}

Status CheckDedupeArgs(const uint64_t* d_ids, int batch, int num_sparse, const uint64_t* d_unique_keys,
                       const int32_t* d_row_index, const int32_t* d_num_unique, const void* d_workspace) {
  if (batch < 0 || num_sparse < 0) {
    return InvalidArgument("DedupeFeatureKeys: batch " + std::to_string(batch) + " and num_sparse " +
                           std::to_string(num_sparse) + " must be >= 0");
  }
  if (num_sparse > data::kMaxSparseFeatures) {
    return InvalidArgument("DedupeFeatureKeys: num_sparse " + std::to_string(num_sparse) + " exceeds " +
                           std::to_string(data::kMaxSparseFeatures) + " (16 feature bits in a key)");
  }
  const int64_t n = static_cast<int64_t>(batch) * num_sparse;
  if (n > INT32_MAX) {
    return InvalidArgument("DedupeFeatureKeys: batch * num_sparse = " + std::to_string(n) + " must be < 2^31");
  }
  if (d_num_unique == nullptr) return InvalidArgument("DedupeFeatureKeys: d_num_unique is null");
  if (n > 0 && (d_ids == nullptr || d_unique_keys == nullptr || d_row_index == nullptr || d_workspace == nullptr)) {
    return InvalidArgument("DedupeFeatureKeys: null d_ids, d_unique_keys, d_row_index or d_workspace");
  }
  return Status();
}

}  // namespace

size_t DedupeWorkspaceBytes(int max_ids) {
  if (max_ids < 1) return 0;
  Layout l;
  // Sort and scan scratch grow with the item count and the number of sort passes, so the largest
  // batch over all 64 bits bounds every call (DedupeFeatureKeys checks its own need anyway).
  if (!ComputeLayout(max_ids, 64, &l).ok()) return 0;
  return l.total;
}

Status DedupeFeatureKeys(const uint64_t* d_ids, int batch, int num_sparse, uint64_t* d_unique_keys,
                         int32_t* d_row_index, int32_t* d_num_unique, void* d_workspace, size_t workspace_bytes,
                         void* stream) {
  OSPREY_RETURN_IF_ERROR(
      CheckDedupeArgs(d_ids, batch, num_sparse, d_unique_keys, d_row_index, d_num_unique, d_workspace));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int n = batch * num_sparse;
  if (n == 0) {
    OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_num_unique, 0, sizeof(int32_t), s));
    return Status();
  }
  const int end_bit = EndBit(num_sparse);
  Layout l;
  OSPREY_RETURN_IF_ERROR(ComputeLayout(n, end_bit, &l));
  if (workspace_bytes < l.total) {
    return InvalidArgument("DedupeFeatureKeys: workspace of " + std::to_string(workspace_bytes) + " bytes, " +
                           std::to_string(n) + " ids need " + std::to_string(l.total) +
                           " (size it with DedupeWorkspaceBytes)");
  }
  const uintptr_t raw = reinterpret_cast<uintptr_t>(d_workspace);
  char* base = reinterpret_cast<char*>((raw + kAlign - 1) / kAlign * kAlign);
  auto* keys0 = reinterpret_cast<uint64_t*>(base + l.keys[0]);
  auto* keys1 = reinterpret_cast<uint64_t*>(base + l.keys[1]);
  auto* pos0 = reinterpret_cast<int32_t*>(base + l.pos[0]);
  auto* pos1 = reinterpret_cast<int32_t*>(base + l.pos[1]);
  void* temp = base + l.temp;

  MakeKeysKernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, s>>>(d_ids, n, num_sparse, keys0, pos0);
  OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();

  // DoubleBuffer: CUB ping-pongs between our two arrays instead of copying, and tells (on the host,
  // from the pass count) which one holds the result.
  cub::DoubleBuffer<uint64_t> keys(keys0, keys1);
  cub::DoubleBuffer<int32_t> pos(pos0, pos1);
  size_t temp_bytes = l.temp_bytes;
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, pos, n, 0, end_bit, s));

  const uint64_t* sorted = keys.Current();
  FlagIterator flags(thrust::counting_iterator<int32_t>(0), HeadFlag{sorted});
  ScatterIterator scatter(ScatterUnique{sorted, pos.Current(), d_unique_keys, d_row_index, d_num_unique, n - 1});
  temp_bytes = l.temp_bytes;
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(cub::DeviceScan::InclusiveSum(temp, temp_bytes, flags, scatter, n, s));
  return Status();
}

}  // namespace osprey::cuda
