// A restarted worker's data stream (issue 12, worker failover): DataSource::Skip moves a
// training stream past the samples its rank's earlier process consumed -- the synthetic stream by
// seeking, the Criteo reader by line (wrapping like the training stream does) -- so the next
// batch is the one the old process would have read next.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "job/job_config.h"
#include "worker/data/criteo.h"
#include "worker/trainer.h"

namespace osprey::worker {
namespace {

// The batch a fresh source reads after `skip_batches` batches of `n`, and after Skip(skip * n).
void ExpectSkipMatchesReading(const config::JobConfig& job, int rank, int workers, int n, int skip_batches) {
  auto read = MakeDataSource(job, rank, workers, /*train=*/true);
  auto skipped = MakeDataSource(job, rank, workers, /*train=*/true);
  ASSERT_TRUE(read.ok() && skipped.ok());
  data::Batch expected, got;
  for (int i = 0; i <= skip_batches; ++i) ASSERT_TRUE((*read)->Next(n, &expected).ok());
  ASSERT_TRUE((*skipped)->Skip(static_cast<int64_t>(skip_batches) * n).ok());
  ASSERT_TRUE((*skipped)->Next(n, &got).ok());
  ASSERT_EQ(got.size, expected.size);
  EXPECT_EQ(got.ids, expected.ids);
  EXPECT_EQ(got.labels, expected.labels);
  EXPECT_EQ(got.dense, expected.dense);
}

TEST(ResumeStreamTest, SyntheticSkipSeeksToTheSameSamples) {
  config::JobConfig job;
  job.data.source = "synthetic";
  ExpectSkipMatchesReading(job, /*rank=*/1, /*workers=*/2, 64, 5);
}

TEST(ResumeStreamTest, CriteoSkipsThisShardsLinesAndWrapsAround) {
  const std::string path = ::testing::TempDir() + "/resume_stream_test.tsv";
  {
    std::ofstream out(path);
    for (int line = 0; line < 10; ++line) {  // shard 1 of 2: lines 1, 3, 5, 7, 9
      out << (line % 3 == 0 ? "1" : "0");
      for (int j = 0; j < 13; ++j) out << "\t" << line * 13 + j;
      for (int c = 0; c < 26; ++c) {
        char hex[9];
        std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(line * 100 + c));
        out << "\t" << hex;
      }
      out << "\n";
    }
  }
  config::JobConfig job;
  job.data.source = "criteo";
  job.data.train_path = path;
  ExpectSkipMatchesReading(job, 1, 2, 1, 3);  // within the first pass
  ExpectSkipMatchesReading(job, 1, 2, 1, 7);  // past the end: the next epoch, like Next

  auto reader = data::CriteoReader::Open(path, 1, 2);
  ASSERT_TRUE(reader.ok());
  int64_t skipped = 0;
  ASSERT_TRUE((*reader)->SkipSamples(9, &skipped).ok());
  EXPECT_EQ(skipped, 5) << "the shard has 5 lines";
}

}  // namespace
}  // namespace osprey::worker
