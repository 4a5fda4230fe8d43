// Large sparse pulls served over the server's apply pool (cluster.server_apply_threads,
// TableShard::PullSparseRows) answer with the bits one thread sends, and create the rows of
// unseen keys in the order one thread does (same row ids, same initial values): pulls of keys
// with and without rows, duplicates, and the same table pushed to afterwards; rows asked for in
// 16 bits are cast as they are read, with the host cast's bits; large pushes applied on arrival
// resolve their rows over the pool with one thread's results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "common/codec/row_cast.h"
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
    const Buffer v = PullAs(keys, codec::ValueType::kFp32);
    return std::vector<float>(v.as<float>(), v.as<float>() + v.count<float>());
  }

  // The reply's values frame of a pull asking for rows as `type` (fp16 / bf16: the pull codec).
  Buffer PullAs(const std::vector<uint64_t>& keys, codec::ValueType type) {
    proto::Header h;
    h.set_op(proto::OP_PULL_SPARSE);
    h.set_num_keys(keys.size());
    if (type != codec::ValueType::kFp32) {
      h.set_codec(type == codec::ValueType::kBf16 ? proto::CODEC_BF16 : proto::CODEC_FP16);
      h.set_codec_value_type(static_cast<uint32_t>(type));
      h.set_codec_count(keys.size() * kDim);
    }
    Message m;
    m.keys = Buffer::Copy(keys.data(), keys.size() * sizeof(uint64_t));
    EXPECT_TRUE(shard_->Pull(h, m, 0).ok());
    auto sent = replier_.sent();
    EXPECT_EQ(sent.back().header.op(), proto::OP_REPLY) << sent.back().header.error();
    EXPECT_EQ(sent.back().header.codec(), h.codec());
    return sent.back().values;
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

void ExpectSameRecords(PulledShard& x, PulledShard& y) {
  const auto a = x.Records(), b = y.Records();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, rec] : a) {
    ASSERT_EQ(b.count(key), 1u) << key;
    ASSERT_EQ(0, std::memcmp(rec.data(), b.at(key).data(), rec.size() * sizeof(float))) << key;
  }
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

// A large push applied on arrival resolves its keys first (reads only, over the pool when it is
// large), creates the missing rows in key order on the serving thread and applies by id in push
// order: the same bits, row ids and records as one thread and as the one-pass apply by key,
// repeated keys included.
TEST(ParallelPullTest, LargePushesResolveTheirRowsOverThePoolAsOneThreadDoes) {
  ApplyPool pool(3);
  PulledShard one(nullptr), three(&pool);
  const std::vector<uint64_t> first = RandomKeys(40000, 60000, 6);
  ExpectSameBits(one.Pull(first), three.Pull(first));
  const uint64_t split_before = pool.split_runs();
  // Half of these keys have rows, half are new; many appear twice or more.
  const std::vector<uint64_t> second = RandomKeys(120000, 120000, 7);
  one.Push(second, 0.25f);
  three.Push(second, 0.25f);
  EXPECT_GT(pool.split_runs(), split_before) << "the push did not go over the pool";
  EXPECT_EQ(one.Ids(second), three.Ids(second));
  ExpectSameRecords(one, three);
  // Against the one-pass apply by key (pushes below 1024 keys take it): the same keys in pushes of
  // 1000 step each row the same way, in the same order, and create rows in the same order.
  PulledShard by_key(nullptr);
  by_key.Pull(first);  // the same rows as the others had before the push
  for (size_t at = 0; at < second.size(); at += 1000) {
    by_key.Push(std::vector<uint64_t>(second.begin() + at, second.begin() + std::min(second.size(), at + 1000)),
                0.25f);
  }
  EXPECT_EQ(by_key.Ids(second), one.Ids(second));
  ExpectSameRecords(by_key, one);
}

// Rows asked for in 16 bits are cast as they are read (no fp32 copy in between): the bits of the
// host cast of the fp32 rows, on one thread and over the pool, for rows that exist and new ones.
TEST(ParallelPullTest, RowsPulledAs16BitsAreTheCastOfTheFp32Rows) {
  ApplyPool pool(3);
  for (codec::ValueType type : {codec::ValueType::kBf16, codec::ValueType::kFp16}) {
    PulledShard one(nullptr), three(&pool);
    const std::vector<uint64_t> seen = RandomKeys(60000, 80000, 3);
    one.Push(seen, 0.5f);  // rows of these exist (created by the push) and moved
    three.Push(seen, 0.5f);
    for (const std::vector<uint64_t>& keys : {RandomKeys(60000, 160000, 4), RandomKeys(100, 160000, 5)}) {
      const Buffer a = one.PullAs(keys, type), b = three.PullAs(keys, type);
      const std::vector<float> fp32 = one.Pull(keys);  // the new rows exist now, same values
      std::vector<uint16_t> want(fp32.size());
      codec::CastRowValues(fp32.data(), fp32.size(), type, reinterpret_cast<uint8_t*>(want.data()));
      ASSERT_EQ(a.size(), want.size() * sizeof(uint16_t));
      ASSERT_EQ(b.size(), a.size());
      EXPECT_EQ(0, std::memcmp(a.data(), want.data(), a.size())) << codec::ValueTypeName(type) << " one thread";
      EXPECT_EQ(0, std::memcmp(b.data(), want.data(), b.size())) << codec::ValueTypeName(type) << " three threads";
      EXPECT_EQ(one.Ids(keys), three.Ids(keys)) << "rows created in another order";
    }
  }
}

}  // namespace
}  // namespace osprey::server
