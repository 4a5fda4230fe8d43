// CUDA kernels of the worker's sparse path: deduplication of a batch's feature keys on the device
// (the GPU counterpart of data::DedupeKeys), and row gather / scatter between an embedding cache
// and compact row arrays. Host API only; this header never includes CUDA headers.
//
// Conventions (as in worker/cuda/codec_kernels.h):
//  - Pointers named d_* are device memory, borrowed for the call. All work is enqueued on
//    `stream` (a cudaStream_t passed as void*; nullptr is the legacy default stream) and the call
//    returns without waiting: nothing here synchronizes with the host, so outputs are valid once
//    the stream reaches that point.
//  - Returned Statuses report argument errors (InvalidArgument, before anything is enqueued) and
//    launch errors: FailedPrecondition "no CUDA device" when no device or no usable driver is
//    there, Internal for other CUDA errors. A fault inside a kernel (a bad device pointer, a slot
//    out of range) surfaces at the caller's next synchronizing call.
//  - Thread-safety: the functions are stateless; calls may run concurrently from any thread as
//    long as they do not share outputs or a dedupe workspace (a workspace serves one call at a
//    time: order calls that share one on one stream).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/codec/encoded.h"  // codec::ValueType
#include "common/status.h"

namespace osprey::cuda {

// Bytes of device workspace DedupeFeatureKeys needs for batches of up to max_ids ids
// (batch * num_sparse <= max_ids, any num_sparse) on the current device. Allocate it once (e.g.
// DeviceBuffer::Allocate) and reuse it for every batch. Includes the alignment slack, so any
// device pointer works. Returns 0 when max_ids < 1 (no workspace needed) and when the size cannot
// be determined because no usable CUDA device is there (DedupeFeatureKeys then says why).
size_t DedupeWorkspaceBytes(int max_ids);

// Deduplicates the keys of one batch on the device. d_ids: [batch x num_sparse] raw ids in
// data::Batch::ids layout (sample-major). For each entry the key is
// data::FeatureKey(f, id) = (f << 48) ^ (id & 0xFFFFFFFFFFFF) (bits of an id above 47 are
// dropped); then
//   d_unique_keys[0 .. *d_num_unique)  the distinct keys, ascending
//   d_row_index[b * num_sparse + f]    position in d_unique_keys of that entry's key
//   d_num_unique[0]                    number of distinct keys (device int32)
// d_unique_keys and d_row_index have room for batch * num_sparse entries; entries of
// d_unique_keys past the count are left unspecified. The set of keys and the row_index mapping
// are those of data::DedupeKeys; only the order of the unique keys differs (ascending here, first
// appearance there).
//
// Work: one key kernel, one radix sort of (key, position) pairs over bits [0, 48 + ceil(log2
// num_sparse)), one scan that flags segment heads and scatters the results. No allocation, no
// host synchronization, so the call may be captured into a CUDA graph and replayed for batches of
// the same shape (new ids in the same buffer); that removes the host cost of its ~14 enqueues,
// which exceeds the device time on small batches (see osprey-bench-gpu-sparse).
//
// Errors (InvalidArgument): batch < 0, num_sparse < 0 or > 65536, batch * num_sparse >= 2^31,
// d_num_unique null, any other pointer null when batch * num_sparse > 0, workspace_bytes below
// what this batch needs (DedupeWorkspaceBytes(batch * num_sparse) always suffices). An empty batch
// only sets *d_num_unique = 0.
Status DedupeFeatureKeys(const uint64_t* d_ids, int batch, int num_sparse, uint64_t* d_unique_keys,
                         int32_t* d_row_index, int32_t* d_num_unique, void* d_workspace, size_t workspace_bytes,
                         void* stream);

// d_out[i * dim + j] = d_table[d_slots[i] * dim + j] for i < n, j < dim: rows of a cache into a
// compact array. Precondition (not checked on the device): every slot is a row of d_table.
// float4 loads and stores when dim % 4 == 0 and both row arrays are 16-byte aligned, scalar
// otherwise. Errors (InvalidArgument): n < 0, dim < 1, a null pointer when n > 0. n == 0 does
// nothing.
Status GatherRows(const float* d_table, const int32_t* d_slots, int n, int dim, float* d_out, void* stream);

// d_table[d_slots[i] * dim + j] = d_in[i * dim + j] for i < n, j < dim: freshly pulled rows into
// cache slots. Slots should be distinct; for a repeated slot one of its rows lands, which one is
// unspecified. Same preconditions, vectorization and errors as GatherRows.
Status ScatterRows(const float* d_in, const int32_t* d_slots, int n, int dim, float* d_table, void* stream);

// *d_count += the number of non-finite values among d_in[0, n) (atomically; the caller zeroes
// it). InvalidArgument for n < 0 or a null pointer when n > 0; n == 0 does nothing.
Status CountNonFinite(const float* d_in, int64_t n, int32_t* d_count, void* stream);

// d_out[i] = the fp16 or bf16 bits of d_in[i], i < n: the row gradients cast on the device, bit
// for bit codec::CastRowValues (round to nearest even, NaN stays NaN, a finite value beyond the
// format's range saturates). Errors (InvalidArgument): n < 0, a type other than kFp16 / kBf16, a
// null pointer when n > 0. n == 0 does nothing.
Status CastRowValues(const float* d_in, int64_t n, codec::ValueType type, uint16_t* d_out, void* stream);

// ScatterRows for rows pulled in 16 bits: d_table[d_slots[i] * dim + j] = d_in[i * dim + j]
// widened from `type` (kFp16 / kBf16) as codec::WidenRowValues does, bit for bit. Same slot rules
// as ScatterRows. Errors (InvalidArgument): n < 0, dim < 1, another type, a null pointer when n > 0.
Status ScatterRowsWiden(const uint16_t* d_in, codec::ValueType type, const int32_t* d_slots, int n, int dim,
                        float* d_table, void* stream);

// Bytes of device workspace GroupKeysByServer needs for up to max_keys keys on the current device
// (any num_servers); 0 when max_keys < 1 or no usable device is there.
size_t GroupByServerWorkspaceBytes(int max_keys);

// Orders a step's distinct keys by the server that owns them, so the client can send each
// server's keys and gradient rows as one contiguous slice (Client::PushByServer) instead of
// hashing and partitioning them on the host. The owner of a key is ServerForKey(table, key,
// num_servers) of common/placement.h, computed on the device bit for bit as on the host. On the
// stream:
//   d_keys[0, n)              reordered: server 0's keys first, then server 1's, ...; stable
//                             (keys of one server keep their relative order)
//   d_row_index[0, num_ids)   each entry renumbered to its key's new position (the mapping of
//                             DedupeFeatureKeys stays valid for the reordered keys)
//   d_server_counts[s]        keys owned by server s, for s < num_servers
// Work: one hash kernel (which also counts), one radix sort of (server, position) over
// ceil(log2 num_servers) bits, one permute kernel, one renumber kernel; no host synchronization.
// Errors (InvalidArgument): num_servers outside [1, 65536], n or num_ids < 0, a null pointer
// (d_keys / d_row_index / d_workspace only when n > 0), workspace_bytes below what n keys need.
Status GroupKeysByServer(uint32_t table, int num_servers, uint64_t* d_keys, int n, int32_t* d_row_index,
                         int num_ids, int32_t* d_server_counts, void* d_workspace, size_t workspace_bytes,
                         void* stream);

}  // namespace osprey::cuda
