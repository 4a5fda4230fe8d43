// BatchReader (worker/gpu/batch_reader.h): batch t of the synthetic stream is samples
// [t*B, (t+1)*B) whatever the number of generator threads, a pool serves batch t % P, and Stop
// ends a waiting Take. Real threads; the only waits are the reader's own.
#include "worker/gpu/batch_reader.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "worker/data/synthetic.h"

namespace osprey::worker::gpu {
namespace {

config::JobConfig Job() {
  config::JobConfig job;
  job.data.source = "synthetic";
  job.data.synthetic.cardinalities = {100, 1000, 10000};
  job.data.synthetic.num_dense = 3;
  job.train.batch_size = 64;
  return job;
}

// Batch t of worker `rank`'s stream, made directly.
data::Batch Expected(const config::JobConfig& job, int rank, int64_t t) {
  auto gen = data::SyntheticGenerator::Make(job.data.synthetic, static_cast<uint64_t>(rank));
  EXPECT_TRUE(gen.ok()) << gen.status().ToString();
  data::Batch b;
  if (!gen.ok()) return b;
  (*gen)->SeekToSample(static_cast<uint64_t>(t) * job.train.batch_size);
  (*gen)->NextBatch(job.train.batch_size, &b);
  return b;
}

void ExpectSameBatch(const data::Batch& got, const data::Batch& want, int64_t t) {
  EXPECT_EQ(got.size, want.size) << "step " << t;
  EXPECT_EQ(got.ids, want.ids) << "step " << t;
  EXPECT_EQ(got.dense, want.dense) << "step " << t;
  EXPECT_EQ(got.labels, want.labels) << "step " << t;
}

TEST(BatchReaderTest, StepTIsSamplesTBToTPlusOneBForAnyThreadCount) {
  const config::JobConfig job = Job();
  for (int threads : {1, 3}) {
    BatchReader reader(job, /*rank=*/2, /*num_workers=*/4, BatchReaderOptions{true, threads, 0});
    ASSERT_TRUE(reader.Start().ok());
    data::Batch scratch;
    for (int64_t t = 0; t < 12; ++t) {
      const data::Batch* batch = nullptr;
      ASSERT_TRUE(reader.Take(t, &scratch, &batch).ok());
      ASSERT_EQ(batch, &scratch);
      ExpectSameBatch(*batch, Expected(job, 2, t), t);
    }
  }
}

// A restarted worker's reader (SetFirstStep) hands out the same batches from its first step on
// as a reader that started at 0, for the synthetic generators and for a source read in order.
TEST(BatchReaderTest, AReaderResumedAtStepKServesTheFreshStreamsBatchesFromK) {
  const config::JobConfig job = Job();
  for (int threads : {1, 3}) {
    BatchReader reader(job, /*rank=*/1, /*num_workers=*/2, BatchReaderOptions{true, threads, 0});
    reader.SetFirstStep(37);
    ASSERT_TRUE(reader.Start().ok());
    data::Batch scratch;
    for (int64_t t = 37; t < 45; ++t) {
      const data::Batch* batch = nullptr;
      ASSERT_TRUE(reader.Take(t, &scratch, &batch).ok()) << "step " << t;
      ExpectSameBatch(*batch, Expected(job, 1, t), t);
    }
  }
}

TEST(BatchReaderTest, AResumedReaderOverANonSyntheticSourceSkipsTheFirstSteps) {
  const config::JobConfig job = Job();
  BatchReader fresh(job, 0, 1, BatchReaderOptions{false, 1, 0});
  BatchReader resumed(job, 0, 1, BatchReaderOptions{false, 1, 0});
  resumed.SetFirstStep(5);
  ASSERT_TRUE(fresh.Start().ok());
  ASSERT_TRUE(resumed.Start().ok());
  data::Batch a, b;
  const data::Batch* want = nullptr;
  const data::Batch* got = nullptr;
  for (int64_t t = 0; t < 5; ++t) ASSERT_TRUE(fresh.Take(t, &a, &want).ok());
  for (int64_t t = 5; t < 9; ++t) {
    ASSERT_TRUE(fresh.Take(t, &a, &want).ok());
    ASSERT_TRUE(resumed.Take(t, &b, &got).ok());
    ExpectSameBatch(*got, *want, t);
  }
}

TEST(BatchReaderTest, PoolServesBatchTModuloItsSizeWithoutCopies) {
  const config::JobConfig job = Job();
  BatchReader reader(job, 0, 1, BatchReaderOptions{true, /*threads=*/2, /*pool=*/3});
  ASSERT_TRUE(reader.Start().ok());  // makes the pool before returning
  data::Batch scratch;
  const data::Batch* first = nullptr;
  for (int64_t t = 0; t < 7; ++t) {
    const data::Batch* batch = nullptr;
    ASSERT_TRUE(reader.Take(t, &scratch, &batch).ok());
    EXPECT_NE(batch, &scratch);
    ExpectSameBatch(*batch, Expected(job, 0, t % 3), t);
    if (t == 0) first = batch;
    if (t % 3 == 0) {
      EXPECT_EQ(batch, first);
    }
  }
  EXPECT_EQ(scratch.size, 0);  // never written
}

TEST(BatchReaderTest, StopEndsAWaitingTakeWithAborted) {
  config::JobConfig job = Job();
  job.data.synthetic.cardinalities = {};  // the generator cannot be made: no batch ever arrives
  job.data.synthetic.num_dense = -1;
  BatchReader reader(job, 0, 1, BatchReaderOptions{true, 1, 0});
  ASSERT_TRUE(reader.Start().ok());
  data::Batch scratch;
  const data::Batch* batch = nullptr;
  Status first = reader.Take(0, &scratch, &batch);  // the generator's error, delivered at step 0
  EXPECT_FALSE(first.ok());
  Status got;
  std::thread taker([&] { got = reader.Take(1, &scratch, &batch); });  // nothing after the error
  reader.Stop();
  taker.join();
  EXPECT_EQ(got.code(), StatusCode::kAborted) << got.ToString();
}

TEST(BatchReaderTest, ABadGeneratorFailsThePoolInStart) {
  config::JobConfig job = Job();
  job.data.synthetic.num_dense = -1;
  BatchReader reader(job, 0, 1, BatchReaderOptions{true, 2, 4});
  EXPECT_FALSE(reader.Start().ok());
}

}  // namespace
}  // namespace osprey::worker::gpu
