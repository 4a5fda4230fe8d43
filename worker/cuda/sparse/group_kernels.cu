// GroupKeysByServer: the owner of each key hashed on the device (common/placement.h, shared with
// the host), a stable radix sort of (server, position) pairs, then the keys permuted and the
// row index renumbered through the inverse permutation.
#include <cub/device/device_radix_sort.cuh>

#include <string>

#include "common/placement.h"
#include "worker/cuda/sparse/sparse_check.cuh"
#include "worker/cuda/sparse/sparse_kernels.h"

namespace osprey::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kAlign = 256;

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

int ServerBits(int num_servers) {
  int bits = 1;
  while (bits < 31 && (1 << bits) < num_servers) ++bits;
  return bits;
}

__global__ void ServerKernel(uint32_t table, int num_servers, const uint64_t* __restrict__ keys, int n,
                             uint32_t* __restrict__ server, int32_t* __restrict__ pos, int32_t* __restrict__ counts) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t s = ServerForKey(table, keys[i], num_servers);
  server[i] = static_cast<uint32_t>(s);
  pos[i] = i;
  atomicAdd(&counts[s], 1);
}

// sorted position j holds old position perm[j]: the key moves there, and old -> new is recorded.
__global__ void PermuteKernel(const uint64_t* __restrict__ keys, const int32_t* __restrict__ perm, int n,
                              uint64_t* __restrict__ out, int32_t* __restrict__ inverse) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const int32_t old = perm[j];
  out[j] = keys[old];
  inverse[old] = j;
}

__global__ void RenumberKernel(const int32_t* __restrict__ inverse, int num_ids, int32_t* __restrict__ row_index) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < num_ids) row_index[i] = inverse[row_index[i]];
}

struct Layout {
  size_t server[2] = {0, 0};
  size_t pos[2] = {0, 0};
  size_t keys = 0;
  size_t inverse = 0;
  size_t temp = 0;
  size_t temp_bytes = 0;
  size_t total = 0;  // including kAlign of slack for an unaligned base
};

Status ComputeLayout(int n, int bits, Layout* out) {
  Layout l;
  size_t sort_bytes = 0;
  cub::DoubleBuffer<uint32_t> server(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> pos(nullptr, nullptr);
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(
      cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, server, pos, n, 0, bits, cudaStream_t{nullptr}));
  size_t offset = 0;
  for (int b = 0; b < 2; ++b) {
    l.server[b] = offset;
    offset += AlignUp(sizeof(uint32_t) * static_cast<size_t>(n));
  }
  for (int b = 0; b < 2; ++b) {
    l.pos[b] = offset;
    offset += AlignUp(sizeof(int32_t) * static_cast<size_t>(n));
  }
  l.keys = offset;
  offset += AlignUp(sizeof(uint64_t) * static_cast<size_t>(n));
  l.inverse = offset;
  offset += AlignUp(sizeof(int32_t) * static_cast<size_t>(n));
  l.temp = offset;
  l.temp_bytes = AlignUp(sort_bytes);
  l.total = kAlign + offset + l.temp_bytes;
  *out = l;
  return Status();
}

}  // namespace

size_t GroupByServerWorkspaceBytes(int max_keys) {
  if (max_keys < 1) return 0;
  Layout l;
  // The sort's scratch grows with the item count and the passes: 16 bits bounds every call.
  if (!ComputeLayout(max_keys, 16, &l).ok()) return 0;
  return l.total;
}

Status GroupKeysByServer(uint32_t table, int num_servers, uint64_t* d_keys, int n, int32_t* d_row_index,
                         int num_ids, int32_t* d_server_counts, void* d_workspace, size_t workspace_bytes,
                         void* stream) {
  if (num_servers < 1 || num_servers > 65536) {
    return InvalidArgument("GroupKeysByServer: num_servers " + std::to_string(num_servers) + " outside [1, 65536]");
  }
  if (n < 0 || num_ids < 0) {
    return InvalidArgument("GroupKeysByServer: n " + std::to_string(n) + " and num_ids " + std::to_string(num_ids) +
                           " must be >= 0");
  }
  if (d_server_counts == nullptr) return InvalidArgument("GroupKeysByServer: d_server_counts is null");
  if (n > 0 && (d_keys == nullptr || d_workspace == nullptr || (num_ids > 0 && d_row_index == nullptr))) {
    return InvalidArgument("GroupKeysByServer: null d_keys, d_row_index or d_workspace");
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(d_server_counts, 0, sizeof(int32_t) * static_cast<size_t>(num_servers), s));
  if (n == 0) return Status();
  const int bits = ServerBits(num_servers);
  Layout l;
  OSPREY_RETURN_IF_ERROR(ComputeLayout(n, bits, &l));
  if (workspace_bytes < l.total) {
    return InvalidArgument("GroupKeysByServer: workspace of " + std::to_string(workspace_bytes) + " bytes, " +
                           std::to_string(n) + " keys need " + std::to_string(l.total) +
                           " (size it with GroupByServerWorkspaceBytes)");
  }
  const uintptr_t raw = reinterpret_cast<uintptr_t>(d_workspace);
  char* base = reinterpret_cast<char*>((raw + kAlign - 1) / kAlign * kAlign);
  auto* server0 = reinterpret_cast<uint32_t*>(base + l.server[0]);
  auto* server1 = reinterpret_cast<uint32_t*>(base + l.server[1]);
  auto* pos0 = reinterpret_cast<int32_t*>(base + l.pos[0]);
  auto* pos1 = reinterpret_cast<int32_t*>(base + l.pos[1]);
  auto* keys = reinterpret_cast<uint64_t*>(base + l.keys);
  auto* inverse = reinterpret_cast<int32_t*>(base + l.inverse);
  const int blocks = (n + kThreads - 1) / kThreads;

  ServerKernel<<<blocks, kThreads, 0, s>>>(table, num_servers, d_keys, n, server0, pos0, d_server_counts);
  OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  cub::DoubleBuffer<uint32_t> server(server0, server1);
  cub::DoubleBuffer<int32_t> pos(pos0, pos1);
  size_t temp_bytes = l.temp_bytes;
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(
      cub::DeviceRadixSort::SortPairs(base + l.temp, temp_bytes, server, pos, n, 0, bits, s));
  PermuteKernel<<<blocks, kThreads, 0, s>>>(d_keys, pos.Current(), n, keys, inverse);
  OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d_keys, keys, sizeof(uint64_t) * static_cast<size_t>(n), cudaMemcpyDeviceToDevice, s));
  if (num_ids > 0) {
    RenumberKernel<<<(num_ids + kThreads - 1) / kThreads, kThreads, 0, s>>>(inverse, num_ids, d_row_index);
    OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  }
  return Status();
}

}  // namespace osprey::cuda
