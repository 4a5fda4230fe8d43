#include "server/native_store.h"

#include <gtest/gtest.h>

#include <vector>

#include "server/sparse_table.h"
#include "server/updater.h"

namespace osprey::server {
namespace {

config::TableConfig SparseConfig(int dim, const std::string& opt = "sgd") {
  config::TableConfig c;
  c.name = "t";
  c.type = config::TableType::kSparse;
  c.dim = dim;
  c.optimizer.type = *ParseOptimizerType(opt);
  c.optimizer.lr = 0.1f;
  return c;
}

TEST(SparseTableTest, GrowsAndKeepsEveryRow) {
  SparseTable t(0, 2, config::InitConfig{}, *Optimizer::Make(SparseConfig(2).optimizer));
  const uint64_t kN = 100000;  // forces many doublings of the hash table
  for (uint64_t k = 0; k < kN; ++k) {
    float* row = t.FindOrCreate(k * 7919);
    row[0] = static_cast<float>(k);
  }
  EXPECT_EQ(t.num_rows(), kN);
  for (uint64_t k = 0; k < kN; ++k) {
    float* row = t.Find(k * 7919);
    ASSERT_NE(row, nullptr);
    ASSERT_EQ(row[0], static_cast<float>(k));
  }
  EXPECT_EQ(t.Find(3), nullptr);
}

TEST(SparseTableTest, InitializerDependsOnSeedTableAndKeyOnly) {
  config::InitConfig init;
  init.scale = 0.1f;
  SparseTable a(1, 8, init, *Optimizer::Make(SparseConfig(8).optimizer));
  SparseTable b(1, 8, init, *Optimizer::Make(SparseConfig(8, "adam").optimizer));
  SparseTable c(2, 8, init, *Optimizer::Make(SparseConfig(8).optimizer));
  std::vector<float> wa(8), wb(8), wc(8);
  a.InitialWeights(123, wa.data());
  b.InitialWeights(123, wb.data());
  c.InitialWeights(123, wc.data());
  EXPECT_EQ(wa, wb);
  EXPECT_NE(wa, wc);
  for (float x : wa) {
    EXPECT_LE(std::abs(x), 0.1f);
  }
  init.type = config::InitType::kZeros;
  SparseTable z(1, 8, init, *Optimizer::Make(SparseConfig(8).optimizer));
  z.InitialWeights(123, wa.data());
  for (float x : wa) EXPECT_EQ(x, 0.0f);
}

TEST(NativeStoreTest, DuplicateKeysInOnePushApplyTwice) {
  NativeStore store;
  StoreTableSpec spec;
  spec.config = SparseConfig(1);
  spec.config.init.type = config::InitType::kZeros;
  auto updater = Updater::Make(spec.config.optimizer);
  ASSERT_TRUE(updater.ok());
  spec.state = (*updater)->state_layout();
  ASSERT_TRUE(store.CreateTable(spec).ok());
  std::vector<uint64_t> keys = {4, 4};
  std::vector<float> g = {1.0f, 2.0f};
  ASSERT_TRUE((*updater)->ApplyRows(&store, 0, keys.data(), 2, 1, g.data(), ApplyOptions{}).ok());
  float out;
  ASSERT_TRUE(store.PullRows(0, keys.data(), 1, &out).ok());
  EXPECT_FLOAT_EQ(out, -0.3f);
  EXPECT_EQ(store.num_rows(0), 1u);
}

// The Store contract the Updater relies on (what a second backend must do too): kRead hands out
// null for missing rows and creates nothing; kUpdate creates rows with the layout's initial state
// and keeps what the callback writes, history included; blocks cover the keys in order.
TEST(NativeStoreTest, VisitRowsReadCreatesNothingAndUpdateKeepsWrites) {
  NativeStore store;
  StoreTableSpec spec;
  spec.config = SparseConfig(2, "adagrad");
  spec.config.optimizer.initial_accumulator = 0.25f;
  spec.state = (*Updater::Make(spec.config.optimizer))->state_layout();
  ASSERT_TRUE(store.CreateTable(spec).ok());
  std::vector<uint64_t> keys(kRowBlockRows + 3);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1000 + i;
  size_t seen = 0;
  ASSERT_TRUE(store.VisitRows(0, keys.data(), keys.size(), RowAccess::kRead, [&](const RowBlock& b) {
    EXPECT_EQ(b.begin, seen);
    for (size_t j = 0; j < b.n; ++j) {
      EXPECT_EQ(b.rows[j], nullptr);
      EXPECT_EQ(b.history[j], nullptr);
    }
    seen += b.n;
    return Status::OK();
  }).ok());
  EXPECT_EQ(seen, keys.size());
  EXPECT_EQ(store.num_rows(0), 0u);
  ASSERT_TRUE(store.VisitRows(0, keys.data(), keys.size(), RowAccess::kUpdate, [&](const RowBlock& b) {
    for (size_t j = 0; j < b.n; ++j) {
      EXPECT_EQ(b.rows[j][2], 0.25f);  // the state after the 2 weights: initial_accumulator
      EXPECT_EQ(b.history[j][0], 0u);
      b.rows[j][0] = static_cast<float>(b.begin + j);
      b.history[j][0] = 7;
    }
    return Status::OK();
  }).ok());
  EXPECT_EQ(store.num_rows(0), keys.size());
  ASSERT_TRUE(store.VisitRows(0, keys.data(), keys.size(), RowAccess::kRead, [&](const RowBlock& b) {
    for (size_t j = 0; j < b.n; ++j) {
      EXPECT_EQ(b.rows[j][0], static_cast<float>(b.begin + j));
      EXPECT_EQ(b.history[j][0], 7u);
    }
    return Status::OK();
  }).ok());
  // A callback's error stops the visit and is returned.
  int blocks = 0;
  Status s = store.VisitRows(0, keys.data(), keys.size(), RowAccess::kUpdate, [&](const RowBlock&) {
    ++blocks;
    return DataLoss("stop");
  });
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(blocks, 1);
}

TEST(NativeStoreTest, DenseChunksAndShortLastChunk) {
  NativeStore store;
  StoreTableSpec spec;
  spec.id = 0;
  spec.config.type = config::TableType::kDense;
  spec.config.size = 10;
  spec.config.chunk_floats = 4;
  spec.owned_chunks = {0, 2};
  spec.state = (*Updater::Make(spec.config.optimizer))->state_layout();
  ASSERT_TRUE(store.CreateTable(spec).ok());
  EXPECT_EQ(store.ChunkFloats(0, 0), 4u);
  EXPECT_EQ(store.ChunkFloats(0, 2), 2u);
  EXPECT_EQ(store.ChunkFloats(0, 3), 0u);
  std::vector<uint64_t> chunks = {1};
  std::vector<float> out(4);
  EXPECT_EQ(store.PullChunks(0, chunks.data(), 1, out.data()).code(), StatusCode::kInternal);
  EXPECT_EQ(store.CreateTable(spec).code(), StatusCode::kInternal);  // twice
}

}  // namespace
}  // namespace osprey::server
