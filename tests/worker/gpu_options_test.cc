// ResolveGpuOptions (worker/gpu/gpu_options.h): each rule of the GPU loop's option resolution --
// the pipeline depth, the cache's capacity and staleness bound, the pull gate, the dense buckets
// -- and the cache-fits check, on the CPU.
#include "worker/gpu/gpu_options.h"

#include <gtest/gtest.h>

#include <string>

namespace osprey::worker::gpu {
namespace {

// A job with the model's two tables (both bsp) and synthetic data of 1000 + 3000 keys.
config::JobConfig Job() {
  config::JobConfig job;
  config::TableConfig sparse, dense;
  sparse.name = job.model.sparse_table;
  sparse.type = config::TableType::kSparse;
  sparse.consistency.mode = config::ConsistencyMode::kBsp;
  dense.name = job.model.dense_table;
  dense.type = config::TableType::kDense;
  dense.consistency.mode = config::ConsistencyMode::kBsp;
  job.tables = {sparse, dense};
  job.data.source = "synthetic";
  job.data.synthetic.cardinalities = {1000, 3000};
  job.train.batch_size = 256;
  job.worker.pull_threads = 3;
  job.worker.plan_threads = 4;
  return job;
}

// 26 sparse features, 10000 dense parameters in chunks of 1024.
GpuModelShape Shape() {
  GpuModelShape s;
  s.num_sparse_features = 26;
  s.num_dense_params = 10000;
  s.dense_table_floats = 10000;
  s.dense_chunk_floats = 1024;
  return s;
}

GpuOptions Resolve(const config::JobConfig& job, const GpuModelShape& shape = Shape()) {
  auto o = ResolveGpuOptions(job, shape);
  EXPECT_TRUE(o.ok()) << o.status().ToString();
  return o.ok() ? *o : GpuOptions{};
}

void SetModes(config::JobConfig* job, config::ConsistencyMode sparse, config::ConsistencyMode dense) {
  job->tables[0].consistency.mode = sparse;
  job->tables[1].consistency.mode = dense;
}

TEST(GpuOptionsTest, RingIsTwoPlusThePullThreadsAndPinsThatManySteps) {
  config::JobConfig job = Job();
  GpuOptions o = Resolve(job);
  EXPECT_EQ(o.pull_threads, 3);
  EXPECT_EQ(o.ring, 5);
  EXPECT_EQ(o.cache.pinned_steps, 5);
  EXPECT_EQ(o.max_batch, 256);
  EXPECT_EQ(o.max_ids, 256u * 26);
}

TEST(GpuOptionsTest, PullThreadsAreCappedAtKMaxPullers) {
  config::JobConfig job = Job();
  job.worker.pull_threads = kMaxPullers + 5;
  GpuOptions o = Resolve(job);
  EXPECT_EQ(o.pull_threads, kMaxPullers);
  EXPECT_EQ(o.ring, kMaxRing);
}

TEST(GpuOptionsTest, MoreThanFourPullersWithTheDeviceCacheAreRefused) {
  config::JobConfig job = Job();
  job.worker.cache.capacity_rows = 1000;
  job.worker.pull_threads = kMaxDeviceCachePullers;
  EXPECT_EQ(Resolve(job).pull_threads, kMaxDeviceCachePullers);
  job.worker.pull_threads = kMaxDeviceCachePullers + 1;
  auto o = ResolveGpuOptions(job, Shape());
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("worker.pull_threads: 5"), std::string::npos) << o.status().ToString();
  EXPECT_NE(o.status().message().find("worker.cache.index host"), std::string::npos) << o.status().ToString();
  // The host index, and the device index without a cache (each step its own scratch slots), take them.
  job.worker.cache.index = "host";
  EXPECT_EQ(Resolve(job).pull_threads, kMaxDeviceCachePullers + 1);
  job = Job();
  job.worker.pull_threads = kMaxPullers;
  EXPECT_EQ(Resolve(job).pull_threads, kMaxPullers);
}

TEST(GpuOptionsTest, CapacityRowsWinOverTheFraction) {
  config::JobConfig job = Job();
  job.worker.cache.capacity_rows = 777;
  job.worker.cache.capacity_fraction = 0.5;
  GpuOptions o = Resolve(job);
  EXPECT_EQ(o.cache.capacity_rows, 777u);
  EXPECT_EQ(o.plan_threads, 4);
}

TEST(GpuOptionsTest, CapacityFractionIsOfTheSummedCardinalities) {
  config::JobConfig job = Job();
  job.worker.cache.capacity_fraction = 0.25;
  EXPECT_EQ(Resolve(job).cache.capacity_rows, 1000u);  // 0.25 x (1000 + 3000)
  job.worker.cache.capacity_fraction = 1e-9;           // rounds to 0: still one row
  EXPECT_EQ(Resolve(job).cache.capacity_rows, 1u);
}

TEST(GpuOptionsTest, CapacityFractionNeedsAKnownKeySpace) {
  config::JobConfig job = Job();
  job.data.source = "criteo";
  job.worker.cache.capacity_fraction = 0.1;
  auto o = ResolveGpuOptions(job, Shape());
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("worker.cache.capacity_fraction"), std::string::npos) << o.status().ToString();
  job.worker.cache.capacity_rows = 100;  // rows need no key space
  EXPECT_EQ(Resolve(job).cache.capacity_rows, 100u);
}

TEST(GpuOptionsTest, TheDeviceIndexGetsTheConfiguredRowsTheRingAndTheStepsKeys) {
  config::JobConfig job = Job();
  job.worker.cache.capacity_rows = 1000;
  job.worker.cache.staleness_bound = 3;
  GpuOptions o = Resolve(job);  // index: device, the default
  EXPECT_TRUE(o.device_index);
  EXPECT_EQ(o.device_cache.capacity_rows, 1000u);
  EXPECT_EQ(o.device_cache.staleness_bound, 3);
  EXPECT_EQ(o.device_cache.pinned_steps, o.ring);
  EXPECT_EQ(o.device_cache.max_keys, static_cast<int>(o.max_ids));
  // 31 sets of 32 ways (1000 rows round down), then one scratch row per key for each step in flight.
  EXPECT_EQ(CacheSlots(o), 31u * 32 + static_cast<uint64_t>(o.ring) * o.max_ids);
  job.worker.cache.index = "host";
  o = Resolve(job);
  EXPECT_FALSE(o.device_index);
  EXPECT_EQ(CacheSlots(o), 1000u);
  // No cache: the device index has no sets (every key in scratch, bound 0), the host one the ring.
  job = Job();
  o = Resolve(job);
  EXPECT_EQ(o.device_cache.capacity_rows, 0u);
  EXPECT_EQ(o.device_cache.staleness_bound, 0);
  EXPECT_EQ(CacheSlots(o), static_cast<uint64_t>(o.ring) * o.max_ids);
}

TEST(GpuOptionsTest, NoCacheHoldsTheRingPlusAQuarterWithBoundZero) {
  config::JobConfig job = Job();
  job.tables[0].consistency.mode = config::ConsistencyMode::kAsync;  // no cache: bound 0 whatever the mode
  job.worker.cache.staleness_bound = 7;
  GpuOptions o = Resolve(job);  // 256 x 26 = 6656 ids >= 4096, 4 plan threads
  EXPECT_EQ(o.cache.capacity_rows, 5u * 6656 + 5u * 6656 / 4);
  EXPECT_EQ(o.cache.staleness_bound, 0);
  EXPECT_EQ(o.plan_threads, 4);
}

TEST(GpuOptionsTest, NoCacheWithFewIdsOrOnePlanThreadIsOneExactShard) {
  config::JobConfig job = Job();
  job.train.batch_size = 100;  // 2600 ids < 4096
  GpuOptions small = Resolve(job);
  EXPECT_EQ(small.cache.capacity_rows, 5u * 2600);
  EXPECT_EQ(small.plan_threads, 1);
  job = Job();
  job.worker.plan_threads = 1;
  GpuOptions one = Resolve(job);
  EXPECT_EQ(one.cache.capacity_rows, 5u * 6656);
  EXPECT_EQ(one.plan_threads, 1);
}

TEST(GpuOptionsTest, ConfiguredStalenessBoundWins) {
  config::JobConfig job = Job();
  job.worker.cache.capacity_rows = 1000;
  job.worker.cache.staleness_bound = 9;
  EXPECT_EQ(Resolve(job).cache.staleness_bound, 9);
  job.worker.cache.staleness_bound = 0;
  EXPECT_EQ(Resolve(job).cache.staleness_bound, 0);
}

TEST(GpuOptionsTest, DefaultStalenessBoundIsTheSparseTables) {
  config::JobConfig job = Job();
  job.worker.cache.capacity_rows = 1000;
  job.worker.cache.staleness_bound = -1;
  SetModes(&job, config::ConsistencyMode::kBsp, config::ConsistencyMode::kAsync);
  EXPECT_EQ(Resolve(job).cache.staleness_bound, 0);
  SetModes(&job, config::ConsistencyMode::kSsp, config::ConsistencyMode::kBsp);
  job.tables[0].consistency.staleness_bound = 3;
  job.tables[1].consistency.staleness_bound = 11;  // the dense table's does not count
  EXPECT_EQ(Resolve(job).cache.staleness_bound, 3);
  SetModes(&job, config::ConsistencyMode::kAsync, config::ConsistencyMode::kBsp);
  EXPECT_EQ(Resolve(job).cache.staleness_bound, 4);
}

TEST(GpuOptionsTest, PullsAreGatedUnlessBothTablesAreAsync) {
  config::JobConfig job = Job();
  SetModes(&job, config::ConsistencyMode::kAsync, config::ConsistencyMode::kAsync);
  EXPECT_FALSE(Resolve(job).gate_pulls);
  SetModes(&job, config::ConsistencyMode::kBsp, config::ConsistencyMode::kAsync);
  EXPECT_TRUE(Resolve(job).gate_pulls);
  SetModes(&job, config::ConsistencyMode::kAsync, config::ConsistencyMode::kSsp);
  EXPECT_TRUE(Resolve(job).gate_pulls);
  SetModes(&job, config::ConsistencyMode::kSsp, config::ConsistencyMode::kSsp);
  EXPECT_TRUE(Resolve(job).gate_pulls);
}

TEST(GpuOptionsTest, BucketsAreWholeChunksAtLeastOne) {
  config::JobConfig job = Job();
  job.worker.dense_bucket_bytes = 8192;  // 2 chunks of 1024 floats
  GpuOptions o = Resolve(job);
  EXPECT_EQ(o.chunk_floats, 1024u);
  EXPECT_EQ(o.bucket_floats, 2048u);
  job.worker.dense_bucket_bytes = 12287;  // 2.99 chunks: rounded down
  EXPECT_EQ(Resolve(job).bucket_floats, 2048u);
  job.worker.dense_bucket_bytes = 4096;  // one chunk
  EXPECT_EQ(Resolve(job).bucket_floats, 1024u);
  GpuModelShape big = Shape();
  big.dense_chunk_floats = 4096;  // 16 KiB chunks, 4 KiB buckets: one chunk each
  EXPECT_EQ(Resolve(job, big).bucket_floats, 4096u);
}

TEST(GpuOptionsTest, ATableWithoutChunksIsOneChunk) {
  config::JobConfig job = Job();
  job.worker.dense_bucket_bytes = 1 << 20;
  GpuModelShape s = Shape();
  s.dense_chunk_floats = 0;
  GpuOptions o = Resolve(job, s);
  EXPECT_EQ(o.chunk_floats, 10000u);
  EXPECT_EQ(o.bucket_floats, 26u * 10000);  // 1 MiB holds 26 such chunks: still whole chunks
}

TEST(GpuOptionsTest, DenseTableOfAnotherSizeIsAnError) {
  GpuModelShape s = Shape();
  s.dense_table_floats = 9999;
  auto o = ResolveGpuOptions(Job(), s);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kInternal);
  EXPECT_NE(o.status().message().find("has 9999 floats, the model 10000"), std::string::npos) << o.status().ToString();
}

TEST(GpuOptionsTest, MissingModelTableIsAnError) {
  config::JobConfig job = Job();
  job.model.dense_table = "nope";
  auto o = ResolveGpuOptions(job, Shape());
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
}

TEST(GpuOptionsTest, SyntheticDataHasItsGeneratorsAndPoolOtherSourcesOneReader) {
  config::JobConfig job = Job();
  job.worker.data_threads = 5;
  job.worker.data_pool_batches = 64;
  GpuOptions o = Resolve(job);
  EXPECT_TRUE(o.reader.synthetic);
  EXPECT_EQ(o.reader.threads, 5);
  EXPECT_EQ(o.reader.pool, 64);
  job.data.source = "criteo";
  o = Resolve(job);
  EXPECT_FALSE(o.reader.synthetic);
  EXPECT_EQ(o.reader.threads, 1);
  EXPECT_EQ(o.reader.pool, 0);
}

TEST(GpuOptionsTest, OnlyDlrmTrainsOnTheGpu) {
  config::JobConfig job = Job();
  job.model.model.type = "dlrm";
  EXPECT_TRUE(CheckGpuModel(job).ok());
  job.model.model.type = "logistic";
  Status s = CheckGpuModel(job);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("trains model.type dlrm, not 'logistic'"), std::string::npos) << s.ToString();
}

TEST(GpuOptionsTest, CacheFitsInNinetyPercentOfTheFreeMemory) {
  const size_t free_bytes = size_t{1} << 30;  // 1 GiB; rows of 16 floats are 64 B
  const uint64_t fits = static_cast<uint64_t>(0.9 * free_bytes / 64);
  EXPECT_TRUE(CheckCacheFits(fits, 16, free_bytes, "cuda:0 (test)").ok());
  Status s = CheckCacheFits(fits + 1, 16, free_bytes, "cuda:0 (test)");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("worker.cache: " + std::to_string(fits + 1) + " rows x 16 floats"), std::string::npos)
      << s.ToString();
  EXPECT_NE(s.message().find("GiB free on cuda:0 (test)"), std::string::npos) << s.ToString();
}

TEST(GpuOptionsTest, ExactTopKEncodesOnTheDeviceUnlessTheConfigSaysHost) {
  config::JobConfig job = Job();
  EXPECT_FALSE(Resolve(job).encode_on_device);  // codec none: nothing to encode
  job.tables[1].codec.type = "topk";
  job.tables[1].codec.granularity = "layer";
  GpuOptions o = Resolve(job);
  EXPECT_TRUE(o.encode_on_device);
  EXPECT_NE(o.encode_why.find("top-k of granularity layer"), std::string::npos) << o.encode_why;
  job.worker.encode_on = "host";
  o = Resolve(job);
  EXPECT_FALSE(o.encode_on_device);
  EXPECT_NE(o.encode_why.find("encode_on = host"), std::string::npos) << o.encode_why;
}

// The sparse table's 16-bit rows: cast (push) and widened (pull) on the device, each from its own
// key, unless encode_on says host.
TEST(GpuOptionsTest, SixteenBitRowsAreCastAndWidenedOnTheDeviceUnlessTheConfigSaysHost) {
  config::JobConfig job = Job();
  GpuOptions o = Resolve(job);
  EXPECT_EQ(o.row_cast, codec::ValueType::kFp32);
  EXPECT_EQ(o.row_widen, codec::ValueType::kFp32);
  job.tables[0].codec.type = "bf16";
  job.tables[0].pull_codec = "fp16";
  o = Resolve(job);
  EXPECT_EQ(o.row_cast, codec::ValueType::kBf16);
  EXPECT_EQ(o.row_widen, codec::ValueType::kFp16);
  job.worker.encode_on = "host";
  o = Resolve(job);
  EXPECT_EQ(o.row_cast, codec::ValueType::kFp32);
  EXPECT_EQ(o.row_widen, codec::ValueType::kFp32);
}

TEST(GpuOptionsTest, CodecsTheDeviceCannotEncodeStayOnTheHostOrFailWhenDeviceIsAsked) {
  config::JobConfig job = Job();
  const codec::CodecConfig defaults;
  for (const char* type : {"onebit", "randomk", "fp16"}) {
    job.tables[1].codec = defaults;
    job.tables[1].codec.type = type;
    job.worker.encode_on = "auto";
    GpuOptions o = Resolve(job);
    EXPECT_FALSE(o.encode_on_device) << type;
    EXPECT_NE(o.encode_why.find(type), std::string::npos) << o.encode_why;
    job.worker.encode_on = "device";
    auto bad = ResolveGpuOptions(job, Shape());
    ASSERT_FALSE(bad.ok()) << type;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("worker.encode_on = device"), std::string::npos) << bad.status().message();
  }
  job.tables[1].codec = defaults;
  job.tables[1].codec.type = "topk";
  job.tables[1].codec.topk_method = "sample";
  job.worker.encode_on = "auto";
  EXPECT_FALSE(Resolve(job).encode_on_device);
  job.tables[1].codec.topk_method = "exact";
  job.tables[1].codec.clip_norm = 1.0f;
  EXPECT_FALSE(Resolve(job).encode_on_device);
}

}  // namespace
}  // namespace osprey::worker::gpu
