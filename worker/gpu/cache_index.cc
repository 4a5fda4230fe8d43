#include "worker/gpu/cache_index.h"

#include <cstring>

#include "worker/cache/sharded_row_cache.h"
#include "worker/cuda/cuda_check.cuh"
#include "worker/cuda/sparse/device_row_cache.h"

namespace osprey::worker::gpu {
namespace {

// The host index: plans on the host threads, then copies the slots and the miss slots.
class HostIndex final : public CacheIndex {
 public:
  HostIndex(const RowCacheOptions& options, int threads, std::unique_ptr<ShardedRowCache> cache)
      : options_(options), threads_(threads), cache_(std::move(cache)) {}

  Status Plan(StepInput* in, int /*servers*/, cudaStream_t stream) override {
    const int u = in->num_unique;
    OSPREY_RETURN_IF_ERROR(cache_->Plan(in->step, in->h_unique.as<uint64_t>(), u, in->h_slots.as<int32_t>(),
                                        &in->miss_keys, &in->miss_slots));
    const size_t m = in->miss_keys.size();
    std::memcpy(in->h_miss_slots.data(), in->miss_slots.data(), m * sizeof(int32_t));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->d_slots.data(), in->h_slots.data(), u * sizeof(int32_t),
                                                cudaMemcpyHostToDevice, stream));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->d_miss_slots.data(), in->h_miss_slots.data(), m * sizeof(int32_t),
                                                cudaMemcpyHostToDevice, stream));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    in->miss_key_ptr = in->miss_keys.data();
    in->num_misses = m;
    in->miss_server_counts = nullptr;  // shard order: the pull hashes them
    return Status::OK();
  }

  Status Reset(cudaStream_t) override {
    base_ += cache_->stats();
    OSPREY_ASSIGN_OR_RETURN(cache_, ShardedRowCache::Make(options_, threads_));
    return Status::OK();
  }

  RowCacheStats stats() const override {
    RowCacheStats s = base_;
    s += cache_->stats();
    return s;
  }
  uint64_t slot_count() const override { return cache_->capacity(); }
  std::string Describe() const override {
    return "host index, " + std::to_string(cache_->capacity()) + " rows, " + std::to_string(cache_->num_shards()) +
           " plan threads";
  }

 private:
  const RowCacheOptions options_;
  const int threads_;
  std::unique_ptr<ShardedRowCache> cache_;
  RowCacheStats base_;  // the counters of the caches before the last Reset
};

// The device index: plans on `stream`, then copies the miss count and the miss keys.
class DeviceIndex final : public CacheIndex {
 public:
  explicit DeviceIndex(std::unique_ptr<cuda::DeviceRowCache> cache) : cache_(std::move(cache)) {}

  Status Plan(StepInput* in, int servers, cudaStream_t stream) override {
    OSPREY_RETURN_IF_ERROR(cache_->Plan(in->step, in->d_unique.as<uint64_t>(), in->num_unique, in->d_slots.as<int32_t>(),
                                        in->d_miss_keys.as<uint64_t>(), in->d_miss_slots.as<int32_t>(), stream));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    const int32_t m = cache_->last_misses();
    if (m < 0 || m > in->num_unique) {
      return Internal("device row cache: " + std::to_string(m) + " misses of " + std::to_string(in->num_unique) + " keys");
    }
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->h_miss_keys.data(), in->d_miss_keys.data(), m * sizeof(uint64_t),
                                                cudaMemcpyDeviceToHost, stream));
    in->miss_server_counts = nullptr;
    if (servers > 1) {  // the keys came grouped by server, and so do their misses
      OSPREY_RETURN_IF_ERROR(cache_->CountMissesByGroup(in->d_server_counts.as<int32_t>(), servers,
                                                        in->d_miss_server_counts.as<int32_t>(), stream));
      OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(in->h_miss_server_counts.data(), in->d_miss_server_counts.data(),
                                                  servers * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
      in->miss_server_counts = in->h_miss_server_counts.as<int32_t>();
    }
    OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    in->miss_key_ptr = in->h_miss_keys.as<uint64_t>();
    in->num_misses = static_cast<size_t>(m);
    return Status::OK();
  }

  Status Reset(cudaStream_t stream) override {
    OSPREY_RETURN_IF_ERROR(cache_->Reset(stream));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return Status::OK();
  }

  RowCacheStats stats() const override { return cache_->stats().cache; }
  uint64_t slot_count() const override { return cache_->slot_count(); }
  std::string Describe() const override {
    return "device index, " + std::to_string(cache_->sets()) + " sets of " + std::to_string(set_assoc::kWays) +
           " ways + " + std::to_string(cache_->options().pinned_steps) + " x " +
           std::to_string(cache_->options().max_keys) + " scratch rows";
  }

 private:
  std::unique_ptr<cuda::DeviceRowCache> cache_;
};

}  // namespace

StatusOr<std::unique_ptr<CacheIndex>> CacheIndex::Make(const GpuOptions& opt) {
  if (opt.device_index) {
    OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<cuda::DeviceRowCache> cache, cuda::DeviceRowCache::Make(opt.device_cache));
    return std::unique_ptr<CacheIndex>(new DeviceIndex(std::move(cache)));
  }
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<ShardedRowCache> cache, ShardedRowCache::Make(opt.cache, opt.plan_threads));
  return std::unique_ptr<CacheIndex>(new HostIndex(opt.cache, opt.plan_threads, std::move(cache)));
}

}  // namespace osprey::worker::gpu
