// Large sparse pulls served over the server's apply pool (cluster.server_apply_threads,
// TableShard::PullSparseRows) answer with the bits one thread sends, and create the rows of
// unseen keys in the order one thread does (same row ids, same initial values): pulls of keys
// with and without rows, duplicates, and the same table pushed to afterwards.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "server/apply_pool.h"
#include "server/native_store.h"
#include "server/table_shard.h"
#include "tests/server/recording_replier.h"

namespace osprey::server {
namespace {

constexpr int kDim = 8;  // a thread takes a range from 8k keys (64k floats) on

class PulledShard {
 public:
  explicit PulledShard(ApplyPool* pool) {
    config::TableConfig cfg;
    cfg.name = "t";
    cfg.type = config::TableType::kSparse;
    cfg.dim = kDim;
    cfg.init.type = config::InitType::kUniform;
    cfg.init.scale = 0.05f;
    cfg.optimizer.type = OptimizerType::kAdagrad;
    cfg.consistency.mode = config::ConsistencyMode::kAsync;
    proto::TableSpec ps;
    ps.set_name(cfg.name);
    ps.set_type(proto::TABLE_SPARSE);
    ps.set_dim(cfg.dim);
    auto created = TableShard::Create(0, ps, cfg, {}, 0, &store_, &counters_, &replier_);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    shard_ = std::move(*created);
    shard_->set_apply_pool(pool);
  }

  std::vector<float> Pull(const std::vector<uint64_t>& keys) {
    proto::Header h;
    h.set_op(proto::OP_PULL_SPARSE);
    h.set_num_keys(keys.size());
    Message m;
    m.keys = Buffer::Copy(keys.data(), keys.size() * sizeof(uint64_t));
    EXPECT_TRUE(shard_->Pull(h, m, 0).ok());
    auto sent = replier_.sent();
    EXPECT_EQ(sent.back().header.op(), proto::OP_REPLY) << sent.back().header.error();
    const Buffer& v = sent.back().values;
    return std::vector<float>(v.as<float>(), v.as<float>() + v.count<float>());
  }

  void Push(const std::vector<uint64_t>& keys, float g) {
    std::vector<float> grad(keys.size() * kDim, g);
    proto::Header h;
    h.set_version(shard_->version());
    ASSERT_TRUE(shard_->Push(h, keys.data(), keys.size(), grad.data(), 0).ok());
    ASSERT_TRUE(shard_->Advance(0).ok());
  }

  std::vector<uint32_t> Ids(const std::vector<uint64_t>& keys) {
    std::vector<uint32_t> ids(keys.size());
    EXPECT_TRUE(store_.FindOrCreateRowIds(0, keys.data(), keys.size(), ids.data()).ok());
    return ids;
  }

  std::map<uint64_t, std::vector<float>> Records() {
    std::map<uint64_t, std::vector<float>> out;
    EXPECT_TRUE(store_.ExportRecords(0, [&](uint64_t key, const float* d, size_t n) {
                        out[key].assign(d, d + n);
                        return Status::OK();
                      }).ok());
    return out;
  }

 private:
  NativeStore store_;
  ServerCounters counters_;
  testing::RecordingReplier replier_;
  std::unique_ptr<TableShard> shard_;
};

std::vector<uint64_t> RandomKeys(size_t n, uint64_t space, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = rng() % space;  // duplicates: n is near the space
  return keys;
}

void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST(ParallelPullTest, PoolPullsServeAndCreateRowsAsOneThreadDoes) {
  ApplyPool pool(3);
  ASSERT_EQ(pool.Ranges(60000, (size_t{1} << 16) / kDim), 3u);  // the split the big pulls get
  PulledShard one(nullptr), three(&pool);
  // All keys new: every row is created after the threads' reads, in key order.
  const std::vector<uint64_t> first = RandomKeys(60000, 80000, 1);
  ExpectSameBits(one.Pull(first), three.Pull(first));
  // Half of these have rows (and were updated), half are new; some appear twice.
  one.Push(first, 0.5f);
  three.Push(first, 0.5f);
  const std::vector<uint64_t> second = RandomKeys(60000, 160000, 2);
  ExpectSameBits(one.Pull(second), three.Pull(second));
  // Small pulls stay on one thread; the same rows either way.
  const std::vector<uint64_t> small(second.begin(), second.begin() + 100);
  ExpectSameBits(one.Pull(small), three.Pull(small));
  // Same rows, same ids (creation order), same records after more pushes.
  EXPECT_EQ(one.Ids(second), three.Ids(second));
  one.Push(second, -0.25f);
  three.Push(second, -0.25f);
  const auto a = one.Records(), b = three.Records();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, rec] : a) {
    ASSERT_EQ(b.count(key), 1u) << key;
    ASSERT_EQ(0, std::memcmp(rec.data(), b.at(key).data(), rec.size() * sizeof(float))) << key;
  }
}

}  // namespace
}  // namespace osprey::server
