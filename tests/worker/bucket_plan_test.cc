// PlanBuckets and OwnedServers (worker/gpu/bucket_plan.h): the dense gradient's buckets in the
// order backward finishes them, whole chunks each, and in a host group which chunks each local
// rank reduces, copies and pushes, checked against the placement hash chunk by chunk.
#include "worker/gpu/bucket_plan.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/placement.h"

namespace osprey::worker::gpu {
namespace {

BucketPlanInput Input(size_t params, size_t chunk, size_t bucket, int servers) {
  BucketPlanInput in;
  in.dense_table = 1;
  in.num_params = params;
  in.chunk_floats = chunk;
  in.bucket_floats = bucket;
  in.servers = servers;
  return in;
}

// For each float of the vector, the root of the range that covers it in `ranges` (-1: none);
// also checks that ranges do not overlap and that neighbours of one root are merged.
std::vector<int> Roots(const std::vector<OwnedRange>& ranges, size_t n) {
  std::vector<int> root(n, -1);
  for (size_t i = 0; i < ranges.size(); ++i) {
    const OwnedRange& r = ranges[i];
    if (i > 0) {
      const OwnedRange& p = ranges[i - 1];
      EXPECT_FALSE(p.root == r.root && p.first + p.count == r.first) << "unmerged ranges at " << r.first;
    }
    for (size_t f = r.first; f < r.first + r.count; ++f) {
      EXPECT_EQ(root[f], -1) << "float " << f << " in two ranges";
      root[f] = r.root;
    }
  }
  return root;
}

TEST(BucketPlanTest, BucketsRunFromTheEndOfTheVectorInWholeChunks) {
  // 25 chunks of 1024 (the last one short), buckets of 2 chunks: 13 buckets.
  BucketPlan plan = PlanBuckets(Input(25000, 1024, 2048, 2));
  ASSERT_EQ(plan.buckets.size(), 13u);
  EXPECT_EQ(plan.buckets[0].begin, 12u * 2048);
  EXPECT_EQ(plan.buckets[0].end, 25000u);
  for (size_t i = 1; i < plan.buckets.size(); ++i) {
    EXPECT_EQ(plan.buckets[i].end, plan.buckets[i - 1].begin);
    EXPECT_EQ(plan.buckets[i].begin % 1024, 0u);
  }
  EXPECT_EQ(plan.buckets.back().begin, 0u);
  EXPECT_TRUE(plan.param_ranges.empty());  // no host group: no broadcasts
  for (const DenseBucket& b : plan.buckets) EXPECT_TRUE(b.ranges.empty());
}

TEST(BucketPlanTest, WithoutAHostGroupThisWorkerCopiesEverythingAndPushesEachServerOnce) {
  const int servers = 3;
  BucketPlan plan = PlanBuckets(Input(25000, 1024, 2048, servers));
  std::vector<int> copied(25000, 0);
  std::vector<int> pushes(servers, 0), last_bucket(servers, -1);
  for (size_t i = 0; i < plan.buckets.size(); ++i) {
    const DenseBucket& b = plan.buckets[i];
    for (const OwnedRange& r : b.own) {
      for (size_t f = r.first; f < r.first + r.count; ++f) copied[f]++;
    }
    for (size_t f = b.begin; f < b.end; f += 1024) {
      last_bucket[ServerForChunk(1, f / 1024, servers)] = static_cast<int>(i);
    }
    ASSERT_EQ(b.push_servers.size(), static_cast<size_t>(servers));
    bool any = false;
    for (int s = 0; s < servers; ++s) {
      if (b.push_servers[s]) pushes[s]++, any = true;
    }
    EXPECT_EQ(b.any_push, any);
  }
  for (int c : copied) ASSERT_EQ(c, 1);
  for (int s = 0; s < servers; ++s) {
    EXPECT_EQ(pushes[s], last_bucket[s] >= 0 ? 1 : 0) << "server " << s;
    if (last_bucket[s] >= 0) {
      EXPECT_TRUE(plan.buckets[last_bucket[s]].push_servers[s]) << "server " << s;
    }
  }
}

TEST(BucketPlanTest, HostGroupRanksReduceEverythingButCopyAndPushOnlyTheirServers) {
  const int servers = 2, local_size = 2;
  for (int rank = 0; rank < local_size; ++rank) {
    BucketPlanInput in = Input(25000, 1024, 2048, servers);
    in.host_group = true;
    in.local_rank = rank;
    in.local_size = local_size;
    BucketPlan plan = PlanBuckets(in);
    std::vector<int> owner(25000);
    for (size_t f = 0; f < owner.size(); ++f) owner[f] = ServerForChunk(1, f / 1024, servers) % local_size;
    EXPECT_EQ(Roots(plan.param_ranges, 25000), owner);  // every float broadcast from its owner
    std::vector<int> reduced(25000, -1), copied(25000, 0);
    for (const DenseBucket& b : plan.buckets) {
      std::vector<int> r = Roots(b.ranges, 25000);
      for (size_t f = 0; f < r.size(); ++f) {
        if (r[f] >= 0) reduced[f] = r[f];
        EXPECT_EQ(r[f] >= 0, f >= b.begin && f < b.end) << "bucket ranges cover exactly the bucket";
      }
      for (const OwnedRange& o : b.own) {
        EXPECT_EQ(o.root, rank);
        for (size_t f = o.first; f < o.first + o.count; ++f) copied[f]++;
      }
      for (int s = 0; s < servers; ++s) {
        if (b.push_servers[s]) {
          EXPECT_EQ(s % local_size, rank) << "rank " << rank << " pushes server " << s;
        }
      }
    }
    EXPECT_EQ(reduced, owner);
    for (size_t f = 0; f < copied.size(); ++f) ASSERT_EQ(copied[f], owner[f] == rank ? 1 : 0) << "float " << f;
  }
}

TEST(BucketPlanTest, OneBucketHoldsASmallVector) {
  BucketPlan plan = PlanBuckets(Input(1000, 1000, 1 << 20, 4));
  ASSERT_EQ(plan.buckets.size(), 1u);
  EXPECT_EQ(plan.buckets[0].begin, 0u);
  EXPECT_EQ(plan.buckets[0].end, 1000u);
  ASSERT_EQ(plan.buckets[0].own.size(), 1u);
  EXPECT_EQ(plan.buckets[0].own[0].count, 1000u);
  EXPECT_TRUE(plan.buckets[0].any_push);
}

TEST(BucketPlanTest, OwnedServersAreThoseCongruentToTheLocalRank) {
  EXPECT_EQ(OwnedServers(5, 1, 2), (std::vector<bool>{false, true, false, true, false}));
  EXPECT_EQ(OwnedServers(3, 0, 1), (std::vector<bool>{true, true, true}));
}

}  // namespace
}  // namespace osprey::worker::gpu
