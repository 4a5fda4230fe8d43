// ParamExchange (worker/gpu/param_exchange.h), the GPU loop's only caller of the Client, against
// two in-process bsp servers and one worker: a step's pulls (whole or only its servers' dense
// chunks), its pushes (rows grouped by server, dense by server mask), and the push window.
#include "worker/gpu/param_exchange.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <vector>

#include "common/placement.h"
#include "tests/testing/cluster_fixture.h"
#include "worker/gpu/gpu_options.h"

namespace osprey::worker::gpu {
namespace {

class ParamExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ActivateAll().ok());
    for (int s = 0; s < 2; ++s) cluster_.server(s).SetLiveWorkers({0});
    ClientOptions o;
    o.worker_rank = 0;
    o.timeout_ms = 5000;
    client_ = std::make_unique<Client>(o, cluster_.NewTransport(), cluster_.map());
    ASSERT_TRUE(client_->Start().ok());
    job_.tables = cluster_.tables();
    job_.model.sparse_table = "emb";
    job_.model.dense_table = "mlp";
    exchange_ = std::make_unique<ParamExchange>(job_, 0, client_.get());
    ASSERT_TRUE(exchange_->Init().ok());
    ASSERT_TRUE(exchange_->InstallCodecs(codec::TensorLayout{}).ok());  // no layer granularity here
    ASSERT_TRUE(exchange_->InitDense(std::vector<float>(10, 0.0f).data()).ok());
  }
  void TearDown() override {
    exchange_.reset();
    if (client_) client_->Stop();
  }

  static std::vector<config::TableConfig> BspTables() {
    std::vector<config::TableConfig> tables = testing::TestTables();
    for (auto& t : tables) t.consistency.mode = config::ConsistencyMode::kBsp;
    return tables;
  }

  testing::InprocCluster cluster_{2, BspTables()};
  std::unique_ptr<Client> client_;
  config::JobConfig job_;
  std::unique_ptr<ParamExchange> exchange_;
};

TEST_F(ParamExchangeTest, FindsTheModelsTablesAndTheServers) {
  EXPECT_EQ(exchange_->sparse_table(), 0u);
  EXPECT_EQ(exchange_->dense_table(), 1u);
  EXPECT_EQ(exchange_->num_servers(), 2);
  EXPECT_EQ(exchange_->dense_spec().size(), 10u);
  EXPECT_EQ(exchange_->compression_stats().messages, 0u);
}

TEST_F(ParamExchangeTest, SlicePullLeavesTheOtherServersChunksAlone) {
  const std::vector<bool> own = {true, false};
  std::vector<float> params(10, 42.0f), rows(4);
  const uint64_t key = 5;
  uint64_t sv = 0, dv = 0;
  ASSERT_TRUE(exchange_->PullStep(0, &key, 1, rows.data(), params.data(), &own, &sv, &dv).ok());
  int mine_count = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const bool mine = ServerForChunk(1, i / 4, 2) == 0;
    mine_count += mine;
    EXPECT_EQ(params[i], mine ? 0.0f : 42.0f) << "float " << i;
  }
  EXPECT_GT(mine_count, 0);
  EXPECT_LT(mine_count, 10) << "the fixture's dense table should span both servers";
}

// Three steps of pushes, each gradient 1 (lr 0.5), with the window of kPushWindow steps; every
// bsp window closes on this worker's push, so step 3's pull sees three SGD steps everywhere.
TEST_F(ParamExchangeTest, StepsOfPushesAreAppliedOncePerStep) {
  // Keys grouped by server, as cuda::GroupKeysByServer leaves them.
  std::vector<uint64_t> keys;
  std::vector<int32_t> counts(2, 0);
  for (int s = 0; s < 2; ++s) {
    for (uint64_t k = 100; k < 140; ++k) {
      if (ServerForKey(0, k, 2) == s) keys.push_back(k), counts[s]++;
    }
  }
  ASSERT_GT(counts[0], 0);
  ASSERT_GT(counts[1], 0);
  const size_t n = keys.size();
  std::vector<float> rows0(n * 4), rows(n * 4), params(10), row_grads(n * 4, 1.0f), dense_grad(10, 1.0f);
  uint64_t sv = 0, dv = 0;
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(exchange_->PullStep(step, keys.data(), n, step == 0 ? rows0.data() : rows.data(), params.data(),
                                    nullptr, &sv, &dv)
                    .ok())
        << "step " << step;
    ASSERT_TRUE(exchange_->WaitPushes(step - kPushWindow).ok());
    exchange_->PushRows(step, keys.data(), n, row_grads.data(), counts.data(), sv);
    exchange_->PushDense(step, dense_grad.data(), dv, {true, true});
    exchange_->EndStep(step);
  }
  ASSERT_TRUE(exchange_->WaitPushes(std::numeric_limits<int64_t>::max()).ok());
  ASSERT_TRUE(exchange_->PullStep(3, keys.data(), n, rows.data(), params.data(), nullptr, &sv, &dv).ok());
  for (float p : params) EXPECT_FLOAT_EQ(p, -1.5f);
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_FLOAT_EQ(rows[i], rows0[i] - 1.5f) << "float " << i;
  EXPECT_GT(dv, 0u);
}

}  // namespace
}  // namespace osprey::worker::gpu
