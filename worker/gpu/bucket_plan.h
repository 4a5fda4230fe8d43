// The dense gradient's buckets and the host group's ownership of the dense chunks: which chunks
// this worker reduces, copies to the host, pushes and pulls (worker/gpu_trainer.h, "NCCL host
// group"). Pure host code over the placement hash (common/placement.h), so it has CPU tests.
//
// Local rank r of a host group of local_size owns the servers s with s % local_size == r, and so
// the chunks those servers hold (chunk c lives on ServerForChunk(table, c, servers)). Without a
// host group this worker owns every chunk and every server.
//
// Thread-safety: pure functions; the plan is a value, read-only once made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace osprey::worker::gpu {

// A contiguous range of the dense vector, in floats, whose chunks one local rank owns (the root
// of its reduce and of its broadcast).
struct OwnedRange {
  size_t first = 0, count = 0;
  int root = 0;
};

// A dense gradient bucket: whole chunks of the dense table, [begin, end) in floats. Buckets are
// numbered in the order backward finishes them: bucket 0 is the end of the vector (the top MLP).
struct DenseBucket {
  size_t begin = 0, end = 0;
  std::vector<OwnedRange> ranges;   // host group: the reduce, one op per range (adjacent ranges
                                    // of one root merged)
  std::vector<OwnedRange> own;      // copied to the host by this rank
  std::vector<bool> push_servers;   // [servers]: pushed once this bucket is on the host (the last
                                    // bucket, in processing order, holding one of their chunks)
  bool any_push = false;
};

struct BucketPlanInput {
  uint32_t dense_table = 0;
  size_t num_params = 0;     // floats of the dense vector, > 0
  size_t chunk_floats = 0;   // > 0
  size_t bucket_floats = 0;  // a multiple of chunk_floats
  int servers = 1;
  bool host_group = false;
  int local_rank = 0, local_size = 1;
};

struct BucketPlan {
  std::vector<DenseBucket> buckets;      // in processing order
  std::vector<OwnedRange> param_ranges;  // host group: the whole vector by owner (the broadcasts)
};

BucketPlan PlanBuckets(const BucketPlanInput& in);

// The servers local rank `local_rank` of `local_size` pushes and pulls the dense chunks of.
std::vector<bool> OwnedServers(int servers, int local_rank, int local_size);

}  // namespace osprey::worker::gpu
