// GpuOptions: what the GPU loop (worker/gpu_trainer.h) derives from the job config before it
// touches a device -- the hot-row cache's size and staleness bound, the pipeline's depth, the
// dense gradient buckets. ResolveGpuOptions is a pure function (config and model shape in,
// options out), so every rule below has a CPU test (tests/worker/gpu_options_test.cc), and it is
// the one place the GPU loop reads the config's mode strings (consistency modes, data source,
// model type).
//
// The rules:
//   pipeline   pull_threads = min(worker.pull_threads, kMaxPullers); ring = 2 + pull_threads steps
//              in flight (the planner on t + ring - 1, the pullers on t+1 .. t+pull_threads, the
//              main thread on t), which is also the cache's pinned_steps.
//   cache      capacity_rows: worker.cache.capacity_rows when > 0, else capacity_fraction x the
//              key space (the sum of the synthetic cardinalities; at least 1 row; other data
//              sources have no known key space: InvalidArgument), else no reuse: room for the
//              ring's steps (ring x max_ids), plus a quarter when plan_threads > 1 shards hold at
//              least 4096 keys per step (the uneven spread of keys over the shards), otherwise
//              one plan thread; and staleness bound 0.
//              staleness_bound (with a cache): worker.cache.staleness_bound when >= 0, else the
//              sparse table's: bsp 0, ssp its consistency.staleness_bound, async 4.
//              device_index (worker.cache.index device, the default): device_cache gets the
//              configured capacity (0 with no cache: every key in the ring's scratch), the same
//              bound, pinned_steps = ring and max_keys = max_ids; the host index's fields above
//              are resolved either way.
//   pulls      gate_pulls: in bsp/ssp (either table) a step's pulls wait until the previous
//              step's pushes are sent.
//   reader     synthetic data: worker.data_threads generators and a pool of
//              worker.data_pool_batches; other sources: one reader thread, no pool.
//   encode     encode_on_device: worker.encode_on device, or auto when the dense table's codec is
//              one the device path encodes exactly as the host (DeviceEncodeUnsupported ""); host,
//              or auto with codec none or another codec: on the host. device with such a codec:
//              InvalidArgument naming worker.encode_on and why.
//   rows       row_cast: the sparse table's codec fp16 / bf16 (its rows go as 16-bit values), unless
//              worker.encode_on = host: the backward's row gradients are cast on the device and
//              cross to the host in 16 bits (Client::PushCastRows); kFp32 otherwise. row_widen:
//              the same for the table's pull_codec: pulled rows cross to the device in 16 bits and
//              are widened as they are scattered into the cache (cuda::ScatterRowsWiden).
//   buckets    dense_bucket_bytes rounded down to whole chunks of the dense table (at least one
//              chunk); a dense table without chunks (chunk_floats 0) is one chunk.
//
// Thread-safety: pure functions; GpuOptions is a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/codec/codec_config.h"
#include "common/codec/encoded.h"  // codec::ValueType
#include "job/job_config.h"
#include "common/status.h"
#include "worker/cache/row_cache.h"
#include "worker/cache/set_assoc_row_cache.h"
#include "worker/gpu/batch_reader.h"

namespace osprey::worker::gpu {

// Pull stages run on worker.pull_threads threads, at most this many.
constexpr int kMaxPullers = 8;
// With the device index and a cache (set-associative slots shared by the steps in flight), more
// pullers than this are refused: 5 and 6 (a ring of 7-8 steps) ended in non-finite gradients on an
// H100 (bench/results/2026-12-07-h100-s7-dlrm.md), not yet understood; 3 and 4 ran, as did 6 with
// the host index or with no cache.
constexpr int kMaxDeviceCachePullers = 4;
// Steps in flight at most (2 + kMaxPullers).
constexpr int kMaxRing = 2 + kMaxPullers;
// Steps whose pushes may be unacknowledged while the next step pushes.
constexpr int64_t kPushWindow = 2;

// What the model and the shard map say, which the config alone does not.
struct GpuModelShape {
  int num_sparse_features = 0;
  size_t num_dense_params = 0;   // the model's dense parameters
  uint64_t dense_table_floats = 0;  // the dense table's size in the shard map (must equal the above)
  uint64_t dense_chunk_floats = 0;  // the dense table's chunk in the shard map; 0: one chunk
};

struct GpuOptions {
  int max_batch = 0;        // train.batch_size
  size_t max_ids = 0;       // max_batch x sparse features: ids of a step
  int pull_threads = 2;
  int ring = 4;             // steps in flight: 2 + pull_threads
  RowCacheOptions cache;    // host index: capacity_rows, staleness_bound; pinned_steps = ring
  int plan_threads = 1;     // host index: its shards
  bool device_index = true; // worker.cache.index device (worker/gpu/cache_index.h)
  SetAssocOptions device_cache;  // device index: capacity_rows (0: no reuse), the same bound, ring, max_ids
  bool gate_pulls = false;  // bsp/ssp
  size_t chunk_floats = 0;  // the dense table's chunk (num_dense_params when it has none)
  size_t bucket_floats = 0; // a dense gradient bucket: whole chunks
  BatchReaderOptions reader;
  bool encode_on_device = false;  // the dense table's codec runs on the device (device_encoder.h)
  std::string encode_why;         // for the log line: why it runs where it runs
  codec::ValueType row_cast = codec::ValueType::kFp32;  // kFp16 / kBf16: rows cast on the device
  codec::ValueType row_widen = codec::ValueType::kFp32;  // kFp16 / kBf16: pulled rows widened there
  bool check_pulls = false;  // worker.check_pulls (step_checks.cc)
};

// "" when the GPU worker's device path (worker/gpu/device_encoder.h) encodes `config` exactly as
// DenseCompressor does, else why it cannot (e.g. "codec onebit is encoded on the host").
std::string DeviceEncodeUnsupported(const codec::CodecConfig& config);

// OK when the GPU loop can train job's model (model.type dlrm), else InvalidArgument naming it.
Status CheckGpuModel(const config::JobConfig& job);

// The options of job's GPU loop. Errors (InvalidArgument unless said): the job has no sparse or
// dense table named by model.sparse_table / model.dense_table; capacity_fraction with a data
// source whose key space is unknown; Internal when the dense table's size in the shard map is not
// the model's parameter count.
StatusOr<GpuOptions> ResolveGpuOptions(const config::JobConfig& job, const GpuModelShape& shape);

// Rows of the GPU's row array: the host index's capacity, or the device index's sets and scratch.
uint64_t CacheSlots(const GpuOptions& o);

// OK when a cache of capacity_rows x dim floats fits in 90% of free_bytes; otherwise
// ResourceExhausted "worker.cache: R rows x D floats = X GiB do not fit in the Y GiB free on DEVICE".
Status CheckCacheFits(uint64_t capacity_rows, int dim, size_t free_bytes, const std::string& device_name);

}  // namespace osprey::worker::gpu
