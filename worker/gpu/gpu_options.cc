#include "worker/gpu/gpu_options.h"

#include <algorithm>
#include <cstdio>

namespace osprey::worker::gpu {
namespace {

// The staleness bound of a cache whose config says -1: the sparse table's own.
int64_t TableStalenessBound(const config::ConsistencyConfig& c) {
  if (c.mode == config::ConsistencyMode::kBsp) return 0;
  if (c.mode == config::ConsistencyMode::kSsp) return c.staleness_bound;
  return 4;
}

// Fills o->cache.capacity_rows / staleness_bound and o->plan_threads (gpu_options.h, "cache").
Status ResolveCache(const config::JobConfig& job, const config::TableConfig& sparse, GpuOptions* o) {
  const config::WorkerCacheConfig& cc = job.worker.cache;
  uint64_t key_space = 0;
  for (uint64_t c : job.data.synthetic.cardinalities) key_space += c;
  if (cc.capacity_rows > 0) {
    o->cache.capacity_rows = cc.capacity_rows;
  } else if (cc.capacity_fraction > 0) {
    if (job.data.source != "synthetic") {
      return InvalidArgument("worker.cache.capacity_fraction: the key space of '" + job.data.source +
                             "' data is not known; give worker.cache.capacity_rows instead");
    }
    o->cache.capacity_rows = std::max<uint64_t>(1, static_cast<uint64_t>(cc.capacity_fraction * key_space));
  }
  o->plan_threads = job.worker.plan_threads;
  o->device_index = cc.index == "device";
  o->device_cache.capacity_rows = o->cache.capacity_rows;  // 0: no reuse
  if (o->cache.capacity_rows == 0) {
    // No reuse: room for the steps in flight, plus a quarter for the uneven spread of keys over
    // the shards (each shard's load is within a few sqrt(load) of the mean; a quarter is ample
    // from a few thousand keys per shard on, and one shard needs none).
    o->cache.capacity_rows = o->ring * o->max_ids;
    if (o->plan_threads > 1 && o->max_ids >= 4096) {
      o->cache.capacity_rows += o->cache.capacity_rows / 4;
    } else {
      o->plan_threads = 1;
    }
    o->cache.staleness_bound = 0;
  } else if (cc.staleness_bound >= 0) {
    o->cache.staleness_bound = cc.staleness_bound;
  } else {
    o->cache.staleness_bound = TableStalenessBound(sparse.consistency);
  }
  o->device_cache.staleness_bound = o->cache.staleness_bound;
  o->device_cache.pinned_steps = o->ring;
  if (o->max_ids >= (size_t{1} << 31)) {
    return InvalidArgument("train.batch_size: " + std::to_string(o->max_ids) + " ids a step, the GPU loop takes < 2^31");
  }
  o->device_cache.max_keys = static_cast<int>(o->max_ids);
  return Status::OK();
}

}  // namespace

Status CheckGpuModel(const config::JobConfig& job) {
  if (job.model.model.type == "dlrm") return Status::OK();
  return InvalidArgument("worker.device: the GPU loop trains model.type dlrm, not '" + job.model.model.type + "'");
}

StatusOr<GpuOptions> ResolveGpuOptions(const config::JobConfig& job, const GpuModelShape& shape) {
  const int sparse_index = job.TableIndex(job.model.sparse_table);
  const int dense_index = job.TableIndex(job.model.dense_table);
  if (sparse_index < 0) return InvalidArgument("model.sparse_table: no table '" + job.model.sparse_table + "'");
  if (dense_index < 0) return InvalidArgument("model.dense_table: no table '" + job.model.dense_table + "'");
  const config::TableConfig& sparse = job.tables[sparse_index];
  const config::TableConfig& dense = job.tables[dense_index];
  if (shape.dense_table_floats != shape.num_dense_params) {
    return Internal("dense table '" + dense.name + "' has " + std::to_string(shape.dense_table_floats) +
                    " floats, the model " + std::to_string(shape.num_dense_params));
  }
  GpuOptions o;
  o.max_batch = job.train.batch_size;
  o.max_ids = static_cast<size_t>(o.max_batch) * shape.num_sparse_features;
  o.gate_pulls = sparse.consistency.mode != config::ConsistencyMode::kAsync ||
                 dense.consistency.mode != config::ConsistencyMode::kAsync;
  o.pull_threads = std::min(job.worker.pull_threads, kMaxPullers);
  o.ring = 2 + o.pull_threads;
  o.check_pulls = job.worker.check_pulls;
  o.cache.pinned_steps = o.ring;
  OSPREY_RETURN_IF_ERROR(ResolveCache(job, sparse, &o));
  if (o.device_index && o.device_cache.capacity_rows > 0 && o.pull_threads > kMaxDeviceCachePullers) {
    return InvalidArgument("worker.pull_threads: " + std::to_string(o.pull_threads) +
                           " pullers with worker.cache.index device and a cache: at most " +
                           std::to_string(kMaxDeviceCachePullers) +
                           " (more ended in non-finite gradients on an H100 and are refused until that is "
                           "understood); use fewer, or worker.cache.index host");
  }
  o.chunk_floats = shape.dense_chunk_floats > 0 ? shape.dense_chunk_floats : shape.num_dense_params;
  const size_t chunks_per_bucket =
      std::max<size_t>(1, job.worker.dense_bucket_bytes / (o.chunk_floats * sizeof(float)));
  o.bucket_floats = chunks_per_bucket * o.chunk_floats;
  o.reader.synthetic = job.data.source == "synthetic";
  o.reader.threads = o.reader.synthetic ? job.worker.data_threads : 1;
  o.reader.pool = o.reader.synthetic ? job.worker.data_pool_batches : 0;
  const std::string why = dense.codec.type == "none" ? "codec none: nothing to encode" : DeviceEncodeUnsupported(dense.codec);
  if (job.worker.encode_on == "device" && !why.empty()) {
    return InvalidArgument("worker.encode_on = device: table '" + dense.name + "': " + why +
                           " (use encode_on auto or host)");
  }
  o.encode_on_device = job.worker.encode_on != "host" && why.empty();
  if (job.worker.encode_on != "host") {
    o.row_cast = codec::ValueTypeOfName(sparse.codec.type);
    o.row_widen = codec::ValueTypeOfName(sparse.pull_codec);
  }
  o.encode_why = o.encode_on_device ? "exact top-k of granularity " + dense.codec.granularity + ", residual on the device"
                 : job.worker.encode_on == "host" ? "worker.encode_on = host" : why;
  return o;
}

std::string DeviceEncodeUnsupported(const codec::CodecConfig& c) {
  if (c.type != "topk") return "codec " + c.type + " is encoded on the host (the device path does topk)";
  if (c.topk_method != "exact") return "topk_method " + c.topk_method + " is encoded on the host (device: exact)";
  if (c.select != "magnitude") return "select " + c.select + " is encoded on the host (device: magnitude)";
  if (c.clip_norm > 0.0f) return "clip_norm is encoded on the host (the device path does not clip)";
  return "";
}


uint64_t CacheSlots(const GpuOptions& o) {
  if (!o.device_index) return o.cache.capacity_rows;
  return SetAssocSlotCount(o.device_cache);
}

Status CheckCacheFits(uint64_t capacity_rows, int dim, size_t free_bytes, const std::string& device_name) {
  const double cache_bytes = static_cast<double>(capacity_rows) * dim * sizeof(float);
  if (cache_bytes <= 0.9 * static_cast<double>(free_bytes)) return Status::OK();
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "worker.cache: %llu rows x %d floats = %.2f GiB do not fit in the %.2f GiB free on %s",
                static_cast<unsigned long long>(capacity_rows), dim, cache_bytes / (1 << 30),
                static_cast<double>(free_bytes) / (1 << 30), device_name.c_str());
  return ResourceExhausted(buf);
}

}  // namespace osprey::worker::gpu
