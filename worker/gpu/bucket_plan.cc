#include "worker/gpu/bucket_plan.h"

#include <algorithm>

#include "common/placement.h"

namespace osprey::worker::gpu {
namespace {

// Appends [first, first + count) of owner `root` to `ranges`, merging with the previous one.
void Add(std::vector<OwnedRange>* ranges, size_t first, size_t count, int root) {
  if (!ranges->empty() && ranges->back().root == root && ranges->back().first + ranges->back().count == first) {
    ranges->back().count += count;
  } else {
    ranges->push_back({first, count, root});
  }
}

}  // namespace

BucketPlan PlanBuckets(const BucketPlanInput& in) {
  const size_t chunk = in.chunk_floats;
  auto server_of = [&](size_t c) { return ServerForChunk(in.dense_table, c, in.servers); };
  auto owner_of = [&](size_t c) { return server_of(c) % in.local_size; };  // reduces, pushes, pulls chunk c
  const size_t num_buckets = (in.num_params + in.bucket_floats - 1) / in.bucket_floats;
  std::vector<int> last_bucket(in.servers, -1);  // in processing order
  BucketPlan plan;
  for (size_t i = 0; i < num_buckets; ++i) {
    const size_t k = num_buckets - 1 - i;  // processing order: from the end of the vector
    DenseBucket b;
    b.begin = k * in.bucket_floats;
    b.end = std::min(in.num_params, b.begin + in.bucket_floats);
    for (size_t first = b.begin; first < b.end; first += chunk) {
      const size_t c = first / chunk, count = std::min(chunk, b.end - first);
      const int root = in.host_group ? owner_of(c) : 0;
      if (in.host_group) Add(&b.ranges, first, count, root);
      if (!in.host_group || root == in.local_rank) {
        Add(&b.own, first, count, root);
        last_bucket[server_of(c)] = static_cast<int>(i);
      }
    }
    plan.buckets.push_back(std::move(b));
  }
  for (DenseBucket& b : plan.buckets) b.push_servers.assign(in.servers, false);
  for (int s = 0; s < in.servers; ++s) {
    if (last_bucket[s] < 0) continue;
    plan.buckets[last_bucket[s]].push_servers[s] = true;
    plan.buckets[last_bucket[s]].any_push = true;
  }
  if (in.host_group) {
    for (size_t first = 0; first < in.num_params; first += chunk) {
      Add(&plan.param_ranges, first, std::min(chunk, in.num_params - first), owner_of(first / chunk));
    }
  }
  return plan;
}

std::vector<bool> OwnedServers(int servers, int local_rank, int local_size) {
  std::vector<bool> own(servers, false);
  for (int s = 0; s < servers; ++s) own[s] = s % local_size == local_rank;
  return own;
}

}  // namespace osprey::worker::gpu
