// Gradient accumulation (train.accumulate_steps, job/job_config.h) through the real Trainer and
// servers in bsp: with N = 4 each step's one dense push is, bit for bit, the sum of the dense
// gradients of 4 micro-batches computed on the step's parameters; steps count pushes (clocks)
// and samples count micro-batches.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "job/job_config.h"
#include "tests/testing/inproc_training.h"
#include "tests/testing/test_env.h"
#include "worker/client/push_encoder.h"
#include "worker/models/model_factory.h"
#include "worker/trainer.h"

namespace osprey {
namespace {

// Test double of a dense table's encoder (it replaces the compressor, which has nothing to
// compress here): records the floats of every dense push message and sends them as plain fp32.
class RecordingEncoderTestDouble final : public worker::PushEncoder {
 public:
  Status CheckTable(const proto::TableSpec&) const override { return Status::OK(); }
  Status Encode(const worker::PushValues& in, proto::Header*, Buffer* values) override {
    std::vector<float> v(in.floats);
    in.CopyTo(v.data());
    std::lock_guard<std::mutex> lock(mu_);
    pushes_.push_back(std::move(v));
    *values = in.Fp32Frame();
    return Status::OK();
  }
  std::vector<std::vector<float>> pushes() {
    std::lock_guard<std::mutex> lock(mu_);
    return pushes_;
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<float>> pushes_;
};

StatusOr<config::JobConfig> Job(int accumulate, int64_t steps) {
  const char* src = testing::SourceDirFromEnv();
  if (src == nullptr) return FailedPrecondition("OSPREY_SOURCE_DIR is not set");
  return config::LoadJobConfig(std::string(src) + "/configs/local.yaml",
                               {"cluster.workers=1", "train.batch_size=64", "train.steps=" + std::to_string(steps),
                                "train.accumulate_steps=" + std::to_string(accumulate), "train.eval_samples=0",
                                "tables.embeddings.consistency.mode=bsp", "tables.mlp.consistency.mode=bsp"});
}

TEST(AccumulateStepsTest, OnePushIsTheSumOfFourMicroBatchGradients) {
  auto job = Job(4, 3);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  testing::InprocTraining training(*job, /*servers=*/2, /*workers=*/1);
  ASSERT_TRUE(training.Init().ok());
  worker::Client& client = training.client(0);
  auto dense_table = client.TableId(job->model.dense_table);
  auto sparse_table = client.TableId(job->model.sparse_table);
  ASSERT_TRUE(dense_table.ok() && sparse_table.ok());
  auto recorder = std::make_unique<RecordingEncoderTestDouble>();
  RecordingEncoderTestDouble* rec = recorder.get();
  ASSERT_TRUE(client.SetEncoder(*dense_table, std::move(recorder)).ok());

  // Reference of step 0: the initial parameters, the worker's first 4 micro-batches (same data
  // stream), their rows as the servers hold them before training, gradients summed in order.
  auto model = models::MakeModel(job->model.model);
  ASSERT_TRUE(model.ok());
  std::vector<float> params((*model)->num_dense_params());
  (*model)->InitDense(job->model.seed, params.data());
  auto data = worker::MakeDataSource(*job, 0, 1, /*train=*/true);
  ASSERT_TRUE(data.ok());
  std::vector<float> want, grad(params.size());
  for (int m = 0; m < 4; ++m) {
    data::Batch batch;
    ASSERT_TRUE((*data)->Next(64, &batch).ok());
    std::vector<uint64_t> keys;
    std::vector<int32_t> index;
    data::DedupeKeys(batch, &keys, &index);
    const size_t dim = static_cast<size_t>((*model)->embedding_dim());
    std::vector<float> rows(keys.size() * dim), row_grad(rows.size()), probs(batch.size);
    ASSERT_TRUE(client.Wait(client.Pull(*sparse_table, keys.data(), keys.size(), rows.data())).ok());
    (*model)->ForwardBackward(params.data(), rows.data(), keys.size(), index.data(), batch, grad.data(),
                              row_grad.data(), probs.data());
    if (m == 0) {
      want = grad;
    } else {
      for (size_t i = 0; i < want.size(); ++i) want[i] += grad[i];
    }
  }

  ASSERT_TRUE(training.RunAll().ok());
  const std::vector<std::vector<float>> pushes = rec->pushes();
  ASSERT_EQ(pushes.size(), 3u) << "one dense push per step (the MLP is one chunk: one server)";
  ASSERT_EQ(pushes[0].size(), want.size());
  size_t differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += std::memcmp(&pushes[0][i], &want[i], 4) != 0;
  EXPECT_EQ(differ, 0u) << "floats of the first push that are not the bit-exact sum";
  EXPECT_NE(pushes[1], pushes[0]) << "step 1 ran on the parameters step 0 updated";
  const worker::Progress p = training.trainer(0).progress();
  EXPECT_EQ(p.step, 3) << "a step (clock) per push";
  EXPECT_EQ(p.samples, 3u * 4u * 64u);
}

TEST(AccumulateStepsTest, FourTimesFewerDensePushesPerSample) {
  for (int n : {1, 4}) {
    auto job = Job(n, 12 / n);
    ASSERT_TRUE(job.ok());
    testing::InprocTraining training(*job, 2, 1);
    ASSERT_TRUE(training.Init().ok());
    auto dense_table = training.client(0).TableId(job->model.dense_table);
    auto recorder = std::make_unique<RecordingEncoderTestDouble>();
    RecordingEncoderTestDouble* rec = recorder.get();
    ASSERT_TRUE(training.client(0).SetEncoder(*dense_table, std::move(recorder)).ok());
    ASSERT_TRUE(training.RunAll().ok());
    EXPECT_EQ(training.trainer(0).progress().samples, 12u * 64u);
    EXPECT_EQ(rec->pushes().size(), static_cast<size_t>(12 / n)) << "N = " << n;
  }
}

TEST(AccumulateStepsTest, ConfigBounds) {
  EXPECT_FALSE(Job(0, 1).ok());
  EXPECT_TRUE(Job(4096, 1).ok());
  EXPECT_FALSE(Job(4097, 1).ok());
}

}  // namespace
}  // namespace osprey
