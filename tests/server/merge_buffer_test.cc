// Merge-then-apply paths of TableShard give the same bits: the row-id path (RowMergeBuffer, a
// store with row ids, pushes held by reference) against the key-hash path (MergeBuffer, a store
// without row ids) and against a reference that sums each key's pushes in push order by hand and
// applies one step per key. Random pushes with duplicates inside a push, keys in several pushes
// and keys in only one push; stale pushes under lr_scale inverse; skip_row with non-finite rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "server/apply_pool.h"
#include "server/merge_buffer.h"
#include "server/native_store.h"
#include "server/table_shard.h"
#include "server/updater.h"
#include "tests/server/recording_replier.h"

namespace osprey::server {
namespace {

// A NativeStore that hides its row ids, so TableShard takes the key-hash MergeBuffer path (the
// one a store without row ids, e.g. a Redis store, takes).
class NoRowIdStore : public Store {
 public:
  Status CreateTable(const StoreTableSpec& s) override { return inner_.CreateTable(s); }
  Status PullRows(uint32_t t, const uint64_t* k, size_t n, float* out) override {
    return inner_.PullRows(t, k, n, out);
  }
  Status VisitRows(uint32_t t, const uint64_t* k, size_t n, RowAccess a,
                   const RowBlockFn& fn) override {
    return inner_.VisitRows(t, k, n, a, fn);
  }
  Status PullChunks(uint32_t t, const uint64_t* c, size_t n, float* out) override {
    return inner_.PullChunks(t, c, n, out);
  }
  Status VisitChunks(uint32_t t, const uint64_t* c, size_t n, const ChunkBlockFn& fn) override {
    return inner_.VisitChunks(t, c, n, fn);
  }
  Status InitChunks(uint32_t t, const uint64_t* c, size_t n, const float* v) override {
    return inner_.InitChunks(t, c, n, v);
  }
  Status ExportRecords(uint32_t t, const RecordVisitor& v) const override {
    return inner_.ExportRecords(t, v);
  }
  Status ImportRecord(uint32_t t, uint64_t k, const float* d, size_t f) override {
    return inner_.ImportRecord(t, k, d, f);
  }
  size_t RecordFloats(uint32_t t, uint64_t k) const override { return inner_.RecordFloats(t, k); }
  size_t ChunkFloats(uint32_t t, uint64_t c) const override { return inner_.ChunkFloats(t, c); }
  uint64_t num_rows(uint32_t t) const override { return inner_.num_rows(t); }

 private:
  NativeStore inner_;
};

constexpr int kDim = 8;

config::TableConfig Config(const std::string& optimizer, int per_window) {
  config::TableConfig cfg;
  cfg.name = "t";
  cfg.type = config::TableType::kSparse;
  cfg.dim = kDim;
  cfg.optimizer.type = *ParseOptimizerType(optimizer);
  cfg.optimizer.lr = 0.1f;
  cfg.consistency.mode = config::ConsistencyMode::kAsync;
  cfg.consistency.merge_max_pushes = per_window;
  return cfg;
}

struct Push {
  std::vector<uint64_t> keys;
  std::vector<float> g;
  uint64_t version = 0;  // the version the push claims to have pulled (0: current)
  bool as_buffer = true;
  uint32_t part = 0, parts = 0;  // a part of a push sent in parts (Header push_part / push_parts)
};

// Each push cut into `parts` parts of consecutive keys (the client's cut, push_parts.h).
std::vector<Push> InParts(const std::vector<Push>& pushes, uint32_t parts) {
  std::vector<Push> out;
  for (const Push& p : pushes) {
    const size_t n = p.keys.size(), per = (n + parts - 1) / parts;
    for (uint32_t i = 0; i < parts; ++i) {
      Push q = p;
      const size_t begin = i * per, end = std::min(n, begin + per);
      q.keys.assign(p.keys.begin() + begin, p.keys.begin() + end);
      q.g.assign(p.g.begin() + begin * kDim, p.g.begin() + end * kDim);
      q.part = i + 1;
      q.parts = parts;
      out.push_back(std::move(q));
    }
  }
  return out;
}

struct ShardTotals {
  uint64_t version = 0, pushes_applied = 0, windows_applied = 0;
};

// Pushes of random keys from a small key space: duplicates within a push and across pushes, and
// keys that occur in one push only.
std::vector<Push> RandomPushes(int count, size_t keys_per_push, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<Push> pushes(count);
  for (int p = 0; p < count; ++p) {
    for (size_t i = 0; i < keys_per_push; ++i) {
      // Half the keys from a hot set of 16 (repeats), half from a large space (mostly unique).
      pushes[p].keys.push_back(i % 2 == 0 ? rng() % 16 : 1000 + rng() % 100000);
    }
    pushes[p].g.resize(keys_per_push * kDim);
    for (float& x : pushes[p].g) x = u(rng);
    pushes[p].as_buffer = p % 3 != 2;  // some pushes through the copying overload
  }
  return pushes;
}

// Runs `pushes` through a TableShard over `store`; returns every record by key.
std::map<uint64_t, std::vector<float>> RunShard(Store* store, const config::TableConfig& cfg,
                                                const std::vector<Push>& pushes,
                                                ShardTotals* totals = nullptr,
                                                ApplyPool* pool = nullptr) {
  proto::TableSpec ps;
  ps.set_name(cfg.name);
  ps.set_type(proto::TABLE_SPARSE);
  ps.set_dim(cfg.dim);
  ServerCounters counters;
  testing::RecordingReplier replier;
  auto created = TableShard::Create(0, ps, cfg, {}, 0, store, &counters, &replier);
  EXPECT_TRUE(created.ok()) << created.status().ToString();
  TableShard& shard = **created;
  shard.set_apply_pool(pool);
  for (const Push& p : pushes) {
    proto::Header h;
    h.set_version(p.version == 0 ? shard.version() : p.version);
    h.set_push_part(p.part);
    h.set_push_parts(p.parts);
    Status s;
    if (p.as_buffer) {
      s = shard.Push(h, p.keys.data(), p.keys.size(),
                     Buffer::Copy(p.g.data(), p.g.size() * sizeof(float)), 0);
    } else {
      s = shard.Push(h, p.keys.data(), p.keys.size(), p.g.data(), 0);
    }
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(shard.Advance(0).ok());
  }
  if (totals != nullptr) {
    *totals = ShardTotals{shard.version(), counters.pushes_applied.load(), counters.windows_applied.load()};
  }
  std::map<uint64_t, std::vector<float>> out;
  EXPECT_TRUE(store
                  ->ExportRecords(0,
                                  [&](uint64_t key, const float* d, size_t n) {
                                    out[key].assign(d, d + n);
                                    return Status::OK();
                                  })
                  .ok());
  return out;
}

void ExpectSameBits(const std::map<uint64_t, std::vector<float>>& a,
                    const std::map<uint64_t, std::vector<float>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, rec] : a) {
    auto it = b.find(key);
    ASSERT_NE(it, b.end()) << "key " << key;
    ASSERT_EQ(rec.size(), it->second.size());
    ASSERT_EQ(0, std::memcmp(rec.data(), it->second.data(), rec.size() * sizeof(float)))
        << "key " << key;
  }
}

TEST(MergeBufferTest, RowIdPathEqualsKeyPathAndReferenceBitExact) {
  for (const char* opt : {"sgd", "adagrad", "adam", "ftrl"}) {
    SCOPED_TRACE(opt);
    const int per_window = 4;
    const config::TableConfig cfg = Config(opt, per_window);
    const std::vector<Push> pushes = RandomPushes(3 * per_window, 300, 11);
    NativeStore with_ids;
    NoRowIdStore without_ids;
    auto a = RunShard(&with_ids, cfg, pushes);
    auto b = RunShard(&without_ids, cfg, pushes);
    ExpectSameBits(a, b);

    // Reference: per window, sum each key's gradients in push order, one step at 1/pushes.
    NativeStore ref;
    StoreTableSpec spec;
    spec.config = cfg;
    auto updater = Updater::Make(cfg.optimizer);
    ASSERT_TRUE(updater.ok());
    spec.state = (*updater)->state_layout();
    ASSERT_TRUE(ref.CreateTable(spec).ok());
    for (size_t w = 0; w < pushes.size(); w += per_window) {
      std::vector<uint64_t> keys;
      std::map<uint64_t, size_t> at;
      std::vector<float> sum;
      for (size_t p = w; p < w + per_window; ++p) {
        for (size_t i = 0; i < pushes[p].keys.size(); ++i) {
          auto [it, added] = at.try_emplace(pushes[p].keys[i], keys.size());
          const float* g = pushes[p].g.data() + i * kDim;
          if (added) {
            keys.push_back(pushes[p].keys[i]);
            sum.insert(sum.end(), g, g + kDim);
          } else {
            for (int d = 0; d < kDim; ++d) sum[it->second * kDim + d] += g[d];
          }
        }
      }
      ApplyOptions o;
      o.grad_scale = 1.0f / per_window;
      RowUpdate u(o);
      u.version = w / per_window + 1;
      ASSERT_TRUE((*updater)->ApplyRows(&ref, 0, keys.data(), keys.size(), kDim, sum.data(), u).ok());
    }
    std::map<uint64_t, std::vector<float>> r;
    ASSERT_TRUE(ref.ExportRecords(0, [&](uint64_t key, const float* d, size_t n) {
                     r[key].assign(d, d + n);
                     return Status::OK();
                   }).ok());
    ExpectSameBits(a, r);
  }
}

TEST(MergeBufferTest, StalePushesAndSkipRowSameBitsOnBothPaths) {
  config::TableConfig cfg = Config("adagrad", 3);
  cfg.consistency.lr_scale = config::LrScale::kInverse;
  cfg.consistency.non_finite = config::NonFinite::kSkipRow;
  std::vector<Push> pushes = RandomPushes(12, 200, 23);
  for (size_t p = 0; p < pushes.size(); ++p) {
    if (p >= 3 && p % 2 == 1) pushes[p].version = 1;  // stale: per-row staleness and options
    if (p % 4 == 1) pushes[p].g[5 * kDim + 3] = std::numeric_limits<float>::quiet_NaN();
  }
  NativeStore with_ids;
  NoRowIdStore without_ids;
  auto a = RunShard(&with_ids, cfg, pushes);
  auto b = RunShard(&without_ids, cfg, pushes);
  ExpectSameBits(a, b);
  for (const auto& [key, rec] : a) {
    for (float x : rec) ASSERT_TRUE(std::isfinite(x)) << "key " << key;
  }
}

// A push sent in parts (issue 17) lands as the whole push: same bits, and it is one push of its
// window -- windows close after the same pushes, the version counts whole pushes -- on both
// merge paths, applied on arrival and merged, fresh and stale.
TEST(MergeBufferTest, PushesSentInPartsLandAsTheWholePushes) {
  for (int per_window : {1, 2, 4}) {
    SCOPED_TRACE("window of " + std::to_string(per_window));
    config::TableConfig cfg = Config("adagrad", per_window);
    cfg.consistency.lr_scale = config::LrScale::kInverse;
    std::vector<Push> pushes = RandomPushes(8, 300, 31);
    for (size_t p = 3; p < pushes.size(); p += 2) pushes[p].version = 1;  // stale: per-row path
    for (Store* (*make)() : {+[]() -> Store* { return new NativeStore; },
                             +[]() -> Store* { return new NoRowIdStore; }}) {
      std::unique_ptr<Store> whole_store(make()), parts_store(make());
      ShardTotals whole, parts;
      auto a = RunShard(whole_store.get(), cfg, pushes, &whole);
      auto b = RunShard(parts_store.get(), cfg, InParts(pushes, 3), &parts);
      ExpectSameBits(a, b);
      EXPECT_EQ(parts.version, whole.version);
      EXPECT_EQ(parts.pushes_applied, whole.pushes_applied);
      EXPECT_EQ(parts.windows_applied, whole.windows_applied);
      EXPECT_EQ(whole.pushes_applied, 8u);
    }
  }
}

// Leading parts wait in their window: another worker's push between a push's parts does not
// close the window on their account, and the window closes with the last part.
TEST(MergeBufferTest, LeadingPartsDoNotCountTowardsTheirWindow) {
  const config::TableConfig cfg = Config("sgd", 2);
  std::vector<Push> x = InParts(RandomPushes(1, 300, 41), 3);
  const std::vector<Push> y = RandomPushes(1, 300, 43);
  NativeStore store;
  ShardTotals t;
  RunShard(&store, cfg, {x[0], x[1], y[0]}, &t);  // one whole push and two leading parts
  EXPECT_EQ(t.pushes_applied, 0u);
  EXPECT_EQ(t.version, 0u);
  NativeStore store2;
  RunShard(&store2, cfg, {x[0], x[1], y[0], x[2]}, &t);
  EXPECT_EQ(t.pushes_applied, 2u);
  EXPECT_EQ(t.windows_applied, 1u);
  EXPECT_EQ(t.version, 1u);
}

// cluster.server_apply_threads: a window's rows applied over 2 threads give the bits of one
// thread, fresh and stale (per-row options, offset by each thread's range) windows alike.
TEST(MergeBufferTest, WindowsAppliedOverAPoolOfThreadsSameBits) {
  for (const char* opt : {"adagrad", "adam"}) {
    SCOPED_TRACE(opt);
    config::TableConfig cfg = Config(opt, 4);
    cfg.consistency.lr_scale = config::LrScale::kInverse;
    // A window: 4 x 36k keys drawn from 100k (~76k distinct rows), over twice the 32k rows (of 8
    // floats) a thread is given at least, so each window is split over both threads. The fourth
    // window's stale pushes (version 1 of 3) give rows updated in windows 2 and 3 staleness 2
    // (lr / 2) and the others less: per-row options that differ along each thread's range.
    std::vector<Push> pushes = RandomPushes(16, 72000, 23);
    for (size_t p = 13; p < pushes.size(); p += 2) pushes[p].version = 1;
    ApplyPool pool(2);
    ASSERT_EQ(pool.Ranges(70000, (size_t{1} << 18) / kDim), 2u);
    NativeStore one, three;
    ShardTotals t1, t3;
    auto a = RunShard(&one, cfg, pushes, &t1);
    auto b = RunShard(&three, cfg, pushes, &t3, &pool);
    ExpectSameBits(a, b);
    EXPECT_EQ(t1.version, t3.version);
    EXPECT_EQ(t3.windows_applied, 4u);
  }
}

TEST(MergeBufferTest, RowMergeBufferSortsRowsAndSumsDuplicatesInAddOrder) {
  RowMergeBuffer b;
  const float g1[2] = {1.0f, 1e8f}, g2[2] = {2.0f, -1e8f}, g3[2] = {0.5f, 1.0f};
  const float g4[2] = {7.0f, 8.0f};
  b.AddRef(9, g1, 1.0f, 0.0f);
  b.Add(3, g4, 2, 0.5f, 2.0f);
  b.AddRef(9, g2, 0.25f, 3.0f);
  b.AddRef(9, g3);
  b.Merge(2);
  ASSERT_EQ(b.num_rows(), 2u);
  EXPECT_EQ(b.rows()[0], 3u);
  EXPECT_EQ(b.rows()[1], 9u);
  EXPECT_EQ(b.Gradients()[0][0], 7.0f);
  EXPECT_EQ(b.Gradients()[0][1], 8.0f);
  // ((1 + 2) + 0.5, (1e8 - 1e8) + 1): the order added, not any other.
  EXPECT_EQ(b.Gradients()[1][0], 3.5f);
  EXPECT_EQ(b.Gradients()[1][1], 1.0f);
  EXPECT_EQ(b.stats()[1].adds, 3u);
  EXPECT_EQ(b.stats()[1].lr_weight_sum, 2.25f);
  EXPECT_EQ(b.stats()[1].staleness_sum, 3.0f);
  EXPECT_EQ(b.stats()[0].adds, 1u);
  b.Clear();
  EXPECT_TRUE(b.empty());
}

TEST(MergeBufferTest, KeyBufferCopiesOnlyRepeatedKeys) {
  MergeBuffer b;
  float g1[2] = {1.0f, 2.0f};
  const float g2[2] = {3.0f, 4.0f};
  b.AddRef(5, g1, 2);
  b.AddRef(6, g2, 2);
  b.AddRef(5, g2, 2);
  const float* const* g = b.Gradients();
  EXPECT_EQ(g[1], g2);  // referenced, not copied
  EXPECT_NE(g[0], g1);  // summed in the arena
  EXPECT_EQ(g[0][0], 4.0f);
  EXPECT_EQ(g[0][1], 6.0f);
  g1[0] = 100.0f;  // the sum does not depend on the caller's floats any more
  EXPECT_EQ(b.Gradients()[0][0], 4.0f);
}

}  // namespace
}  // namespace osprey::server
