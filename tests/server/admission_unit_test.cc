// The pure parts of feature admission and eviction (server/admission/): the count-min sketch's
// error bounds and serialization, the eviction policy's TTL (steps, seconds on an injected
// clock), max_rows LRU order and bounded sweeps; and NativeStore's row deletion (backward-shift
// deletion in its hash index, erased rows' storage reused) against a std::map model.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/config/table_config.h"
#include "common/config/yaml_fields.h"
#include "server/admission/count_min_sketch.h"
#include "server/admission/eviction.h"
#include "server/native_store.h"
#include "server/row_init.h"
#include "server/updater.h"

namespace osprey::server::admission {
namespace {

TEST(CountMinSketchTest, CountsExactlyWithoutCollisionsAndNeverUnderestimates) {
  CountMinSketch s(1 << 16, 4);
  for (uint32_t i = 1; i <= 5; ++i) EXPECT_EQ(s.Add(42), i);
  EXPECT_EQ(s.Estimate(42), 5u);
  EXPECT_EQ(s.Estimate(43), 0u);
  EXPECT_EQ(s.adds(), 5u);
}

// The classic bound: estimate - true <= (e / w) N with probability >= 1 - e^-d per key. A
// Zipf-like stream of N = 200000 sightings over 50000 keys into a small 2048 x 4 sketch.
TEST(CountMinSketchTest, ErrorWithinTheCountMinBound) {
  const uint32_t w = 2048, d = 4;
  CountMinSketch s(w, d);
  std::map<uint64_t, uint32_t> truth;
  std::mt19937_64 rng(3);
  const int kKeys = 50000;
  std::vector<double> cdf(kKeys);
  double z = 0;
  for (int i = 0; i < kKeys; ++i) cdf[i] = (z += 1.0 / std::pow(i + 1, 1.05));
  std::uniform_real_distribution<double> u(0, z);
  const uint64_t n = 200000;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t key = (std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin()) * 7919 + 1;
    ++truth[key];
    s.Add(key);
  }
  const double bound = std::exp(1.0) / w * static_cast<double>(n);
  size_t over = 0;
  for (const auto& [key, count] : truth) {
    const uint32_t est = s.Estimate(key);
    ASSERT_GE(est, count) << "key " << key << " underestimated";
    if (est - count > bound) ++over;
  }
  const double allowed = std::exp(-static_cast<double>(d));  // 1.8% of the keys
  EXPECT_LE(static_cast<double>(over) / truth.size(), allowed)
      << over << " of " << truth.size() << " keys over the bound " << bound;
  // Conservative update does much better than the bound on average.
  double err = 0;
  for (const auto& [key, count] : truth) err += s.Estimate(key) - count;
  EXPECT_LT(err / truth.size(), bound / 4);
}

TEST(CountMinSketchTest, SerializesMergesAndRefusesCorruptInput) {
  CountMinSketch a(64, 3), b(64, 3);
  for (uint64_t k = 0; k < 100; ++k) a.Add(k);
  for (int i = 0; i < 7; ++i) b.Add(5);
  std::string bytes;
  a.AppendTo(&bytes);
  size_t pos = 0;
  auto back = CountMinSketch::Parse(bytes.data(), bytes.size(), &pos, "test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(pos, bytes.size());
  for (uint64_t k = 0; k < 100; ++k) EXPECT_EQ(back->Estimate(k), a.Estimate(k));
  ASSERT_TRUE(back->MergeFrom(b).ok());
  EXPECT_GE(back->Estimate(5), a.Estimate(5) + 7);
  EXPECT_FALSE(back->MergeFrom(CountMinSketch(32, 3)).ok());
  pos = 0;
  auto cut = CountMinSketch::Parse(bytes.data(), bytes.size() - 1, &pos, "file x");
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(cut.status().message().find("file x"), std::string::npos);
}

config::EvictionConfig Evict(uint64_t steps, double seconds, uint64_t max_rows) {
  config::EvictionConfig c;
  c.ttl_steps = steps;
  c.ttl_seconds = seconds;
  c.max_rows = max_rows;
  return c;
}

TEST(EvictionTest, TtlStepsEvictsRowsNotUpdatedForThatManyVersions) {
  Eviction e(Evict(3, 0, 0));
  Eviction::Evicted out;
  e.Touch(1, 1, 0);
  e.Touch(2, 2, 0);
  e.Sweep(3, 0, 100, &out);
  EXPECT_TRUE(out.by_ttl.empty());
  e.Touch(1, 4, 0);  // 1 updated again: now younger than 2
  e.Sweep(4, 0, 100, &out);
  EXPECT_TRUE(out.by_ttl.empty());
  e.Sweep(5, 0, 100, &out);  // 2 last updated at 2: 3 versions passed
  EXPECT_EQ(out.by_ttl, std::vector<uint64_t>({2}));
  EXPECT_EQ(e.size(), 1u);
  e.Sweep(7, 0, 100, &out);
  EXPECT_EQ(out.by_ttl, std::vector<uint64_t>({1}));
  EXPECT_EQ(e.size(), 0u);
}

TEST(EvictionTest, TtlSecondsOnAnInjectedClock) {
  Eviction e(Evict(0, 2.5, 0));
  Eviction::Evicted out;
  int64_t now = 1000000;  // the fake clock, µs
  e.Touch(10, 1, now);
  now += 1000000;
  e.Touch(11, 2, now);
  now += 1400000;  // 10 is 2.4 s old
  e.Sweep(3, now, 100, &out);
  EXPECT_TRUE(out.by_ttl.empty());
  now += 100000;  // 2.5 s
  e.Sweep(3, now, 100, &out);
  EXPECT_EQ(out.by_ttl, std::vector<uint64_t>({10}));
  now += 1000000;
  e.Sweep(1000, now, 100, &out);  // steps do not matter without ttl_steps
  EXPECT_EQ(out.by_ttl, std::vector<uint64_t>({11}));
}

TEST(EvictionTest, MaxRowsEvictsTheLeastRecentlyUpdatedAndTtlSweepsAreBounded) {
  Eviction e(Evict(1, 0, 3));
  Eviction::Evicted out;
  for (uint64_t k = 1; k <= 3; ++k) e.Touch(k, 1, 0);
  e.Touch(1, 2, 0);  // order now 2, 3, 1
  e.Touch(4, 2, 0);
  e.Touch(5, 2, 0);
  e.Sweep(2, 0, 0, &out);  // no TTL work allowed; the cap still holds
  EXPECT_TRUE(out.by_ttl.empty());
  EXPECT_EQ(out.by_cap, std::vector<uint64_t>({2, 3}));
  EXPECT_EQ(e.size(), 3u);
  e.Sweep(3, 0, 2, &out);  // all three are past ttl_steps 1; at most 2 per sweep
  EXPECT_EQ(out.by_ttl, std::vector<uint64_t>({1, 4}));
  e.Sweep(3, 0, 2, &out);
  EXPECT_EQ(out.by_ttl, std::vector<uint64_t>({5}));
  e.Forget(99);  // untracked: no-op
  EXPECT_EQ(e.size(), 0u);
}

// NativeStore::EraseRows against a std::map model: random creates and erases, with a small
// table so that probe runs wrap around and backward shifts happen constantly.
TEST(NativeStoreEraseTest, RandomCreatesAndErasesMatchAModel) {
  config::TableConfig cfg;
  cfg.name = "emb";
  cfg.dim = 2;
  auto updater = Updater::Make(cfg.optimizer);
  ASSERT_TRUE(updater.ok());
  NativeStore store;
  StoreTableSpec spec;
  spec.config = cfg;
  spec.state = (*updater)->state_layout();
  ASSERT_TRUE(store.CreateTable(spec).ok());
  std::map<uint64_t, float> model;  // key -> weight[0] written
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t key = rng() % 600;
    if (rng() % 3 == 0) {
      size_t erased = 9;
      ASSERT_TRUE(store.EraseRows(0, &key, 1, &erased).ok());
      EXPECT_EQ(erased, model.erase(key));
    } else {
      const float v = static_cast<float>(i);
      ASSERT_TRUE(store.VisitRows(0, &key, 1, RowAccess::kUpdate, [&](const RowBlock& b) {
        if (model.count(key) == 0) {  // a (re)created row starts from the initializer
          float init[2];
          InitialRowWeights(cfg.init, 0, key, 2, init);
          EXPECT_EQ(b.rows[0][0], init[0]) << "key " << key;
          EXPECT_EQ(b.history[0][0], 0u) << "a reused row's history is cleared";
        }
        b.rows[0][0] = v;
        b.history[0][0] = 1;
        return Status::OK();
      }).ok());
      model[key] = v;
    }
  }
  EXPECT_EQ(store.num_rows(0), model.size());
  std::map<uint64_t, float> seen;
  ASSERT_TRUE(store.ExportRecords(0, [&](uint64_t key, const float* d, size_t) {
    seen[key] = d[0];
    return Status::OK();
  }).ok());
  EXPECT_EQ(seen, model);
  for (const auto& entry : model) {
    const uint64_t key = entry.first;  // a plain local: lambdas cannot capture a structured binding in C++17
    ASSERT_TRUE(store.VisitRows(0, &key, 1, RowAccess::kRead, [&](const RowBlock& b) {
      EXPECT_NE(b.rows[0], nullptr) << "key " << key;
      return Status::OK();
    }).ok());
  }
}

}  // namespace
}  // namespace osprey::server::admission

namespace osprey::config {
namespace {

Status ParseOne(const std::string& yaml, TableConfig* t) {
  YamlFields f(YAML::Load(yaml), "tables[0]", "job.yaml");
  ParseTable(f, t);
  return f.Finish();
}

TEST(AdmissionConfigTest, ParsesAndRefusesWithErrorsNamingTheKey) {
  TableConfig t;
  ASSERT_TRUE(ParseOne("{name: emb, type: sparse, admission: {min_count: 2, sketch_width: 4096, "
                       "sketch_depth: 3}, eviction: {ttl_steps: 100, ttl_seconds: 1.5, "
                       "max_rows: 1000}}",
                       &t)
                  .ok());
  EXPECT_EQ(t.admission.min_count, 2);
  EXPECT_EQ(t.admission.sketch_width, 4096);
  EXPECT_EQ(t.admission.sketch_depth, 3);
  EXPECT_TRUE(t.admission.enabled());
  EXPECT_EQ(t.eviction.ttl_steps, 100u);
  EXPECT_EQ(t.eviction.ttl_seconds, 1.5);
  EXPECT_EQ(t.eviction.max_rows, 1000u);
  TableConfig d;
  Status dense = ParseOne("{name: mlp, type: dense, admission: {min_count: 2}}", &d);
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.message().find("tables[0].admission"), std::string::npos) << dense.ToString();
  EXPECT_NE(dense.message().find("sparse tables only"), std::string::npos) << dense.ToString();
  TableConfig w;
  Status width = ParseOne("{name: emb, admission: {min_count: 2, sketch_width: 3}}", &w);
  ASSERT_FALSE(width.ok());
  EXPECT_NE(width.message().find("sketch_width"), std::string::npos) << width.ToString();
  TableConfig u;
  Status unknown = ParseOne("{name: emb, eviction: {ttl: 3}}", &u);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("ttl"), std::string::npos) << unknown.ToString();
}

}  // namespace
}  // namespace osprey::config
