#include "job/job_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "common/config/yaml_fields.h"
#include "server/optim/optimizer.h"
#include "tests/config/minimal_job.h"
#include "tests/testing/test_env.h"

namespace osprey::config {
namespace {

const char* const kMinimal = kMinimalJobYaml;

void ExpectError(const std::string& yaml, const std::vector<std::string>& overrides,
                 const std::string& fragment) {
  auto job = ParseJobConfig(yaml, "test.yaml", overrides);
  ASSERT_FALSE(job.ok()) << "expected an error containing: " << fragment;
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find(fragment), std::string::npos)
      << "message was: " << job.status().message();
}

TEST(JobConfigTest, MinimalConfigLoadsWithDefaultsAndResolvesDenseSize) {
  auto job = ParseJobConfig(kMinimal, "test.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->cluster.num_servers, 2);
  EXPECT_EQ(job->tables.size(), 2u);
  EXPECT_GT(job->tables[1].size, 0u);  // resolved from the model
  EXPECT_EQ(job->TableIndex("mlp"), 1);
  EXPECT_EQ(job->TableIndex("nope"), -1);
}

TEST(JobConfigTest, WorkerCommandIsAListOfStrings) {
  auto job = ParseJobConfig(std::string(kMinimal) + "worker:\n  command: [python3, examples/train_dlrm.py, --steps, 5]\n",
                            "test.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->worker.command, (std::vector<std::string>{"python3", "examples/train_dlrm.py", "--steps", "5"}));
  EXPECT_TRUE(ParseJobConfig(kMinimal, "test.yaml")->worker.command.empty());
  ExpectError(std::string(kMinimal) + "worker:\n  command: python3\n", {}, "worker.command: expected a list");
  ExpectError(std::string(kMinimal) + "worker:\n  command: [[a]]\n", {}, "worker.command[0]: expected a string");
}

TEST(JobConfigTest, UnknownKeyNamesFileAndPath) {
  ExpectError(std::string(kMinimal) + "cluster:\n  srvers: 3\n", {}, "test.yaml: cluster.srvers: unknown key");
}

TEST(JobConfigTest, UnknownTopLevelKey) {
  ExpectError(std::string(kMinimal) + "trian:\n  steps: 3\n", {}, "trian: unknown key");
}

TEST(JobConfigTest, WrongTypeNamesPathAndValue) {
  ExpectError(std::string(kMinimal) + "train:\n  steps: lots\n", {},
              "test.yaml: train.steps: expected an integer, got 'lots'");
}

TEST(JobConfigTest, OutOfRangeValue) {
  ExpectError(std::string(kMinimal) + "cluster:\n  servers: 0\n", {}, "cluster.servers: value 0 is out of range");
}

// The failover and accumulation keys refuse what they cannot mean, naming the key.
TEST(JobConfigTest, FailoverAndAccumulationKeysAreRangeChecked) {
  ExpectError(kMinimal, {"cluster.coordinator_outage_ms=-1"}, "cluster.coordinator_outage_ms: value -1 is out of range");
  ExpectError(kMinimal, {"cluster.server_replace_timeout_ms=-5"},
              "cluster.server_replace_timeout_ms: value -5 is out of range");
  ExpectError(kMinimal, {"train.accumulate_steps=0"}, "train.accumulate_steps: value 0 is out of range");
  ExpectError(std::string(kMinimal) + "train:\n  accumulate_steps: many\n", {},
              "train.accumulate_steps: expected an integer, got 'many'");
  auto job = ParseJobConfig(kMinimal, "test.yaml", {"cluster.server_replace_timeout_ms=0", "train.accumulate_steps=4"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->cluster.server_replace_timeout_ms, 0);
  EXPECT_EQ(job->train.accumulate_steps, 4);
}

// codec.adaptive_ratio (issue 18) is read from YAML and its errors name the table's key.
TEST(JobConfigTest, AdaptiveRatioIsParsedAndBadBoundsNameTheKey) {
  auto job = ParseJobConfig(kMinimal, "test.yaml",
                            {"tables.mlp.codec.type=topk", "tables.mlp.codec.density=0.05",
                             "tables.mlp.codec.adaptive_ratio.min_density=0.01",
                             "tables.mlp.codec.adaptive_ratio.max_density=0.2",
                             "tables.mlp.codec.adaptive_ratio.interval_steps=5"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const codec::AdaptiveRatioConfig& a = job->tables[1].codec.adaptive_ratio;
  EXPECT_TRUE(a.enabled);
  EXPECT_DOUBLE_EQ(a.min_density, 0.01);
  EXPECT_DOUBLE_EQ(a.max_density, 0.2);
  EXPECT_EQ(a.interval_steps, 5u);
  EXPECT_FALSE(job->tables[0].codec.adaptive_ratio.enabled);
  ExpectError(kMinimal,
              {"tables.mlp.codec.type=topk", "tables.mlp.codec.density=0.05",
               "tables.mlp.codec.adaptive_ratio.min_density=0.3", "tables.mlp.codec.adaptive_ratio.max_density=0.2"},
              "tables[1].codec: compression.adaptive_ratio.min_density = 0.3: must be in (0, density");
  ExpectError(kMinimal, {"tables.mlp.codec.adaptive_ratio.min_density=0.01", "tables.mlp.codec.adaptive_ratio.max_density=0.2"},
              "compression.adaptive_ratio = {...}: needs type topk or randomk (a density to move), not none");
  ExpectError(kMinimal, {"tables.mlp.codec.type=topk", "tables.mlp.codec.adaptive_ratio.typo=1"}, "typo");
  // async_barrier: leaving the step barrier needs one (bsp or ssp); the default consistency is async.
  const std::vector<std::string> barrier = {"tables.mlp.codec.type=topk", "tables.mlp.codec.density=0.05",
                                            "tables.mlp.codec.adaptive_ratio.min_density=0.01",
                                            "tables.mlp.codec.adaptive_ratio.max_density=0.2",
                                            "tables.mlp.codec.adaptive_ratio.async_barrier=true"};
  ExpectError(kMinimal, barrier,
              "tables[1].codec.adaptive_ratio.async_barrier: table 'mlp' is async, which has no step barrier to leave");
  for (const char* mode : {"bsp", "ssp"}) {
    std::vector<std::string> sets = barrier;
    sets.push_back(std::string("tables.mlp.consistency.mode=") + mode);
    auto ok = ParseJobConfig(kMinimal, "test.yaml", sets);
    ASSERT_TRUE(ok.ok()) << mode << ": " << ok.status().ToString();
    EXPECT_TRUE(ok->tables[1].codec.adaptive_ratio.async_barrier);
  }
}

TEST(JobConfigTest, NegativeLearningRateInTableNamesIndex) {
  ExpectError(kMinimal, {"tables.embeddings.optimizer.lr=-1"}, "tables[0].optimizer.lr: value -1 is out of range");
}

TEST(JobConfigTest, EnumValueMustBeKnown) {
  ExpectError(kMinimal, {"tables.0.optimizer.type=adamw"}, "'adamw' is not one of");
}

TEST(JobConfigTest, NanIsRefused) {
  ExpectError(kMinimal, {"tables.0.optimizer.lr=.nan"}, "expected a finite number");
}

TEST(JobConfigTest, ListExpected) {
  ExpectError(kMinimal, {"model.bottom_mlp=16"}, "model.bottom_mlp: expected a list");
}

TEST(JobConfigTest, SectionMustBeMapping) {
  ExpectError(std::string(kMinimal) + "cluster: 5\n", {}, "cluster: expected a mapping");
}

TEST(JobConfigTest, YamlSyntaxErrorHasLine) {
  ExpectError("tables: [\n  - name: x\n", {}, "test.yaml:");
}

TEST(JobConfigTest, TableDimMustMatchModel) {
  ExpectError(kMinimal, {"tables.embeddings.dim=8"}, "tables[0].dim: is 8 but model 'dlrm' needs rows of 16");
}

TEST(JobConfigTest, ModelTableMustExist) {
  ExpectError(kMinimal, {"model.sparse_table=emb"}, "model.sparse_table: 'emb' is not a sparse table");
}

TEST(JobConfigTest, DuplicateTableName) {
  ExpectError(kMinimal, {"tables.1.name=embeddings", "tables.1.type=sparse"}, "is used twice");
}

TEST(JobConfigTest, HeartbeatTimeoutMustExceedInterval) {
  ExpectError(kMinimal, {"cluster.heartbeat_interval_ms=1000", "cluster.heartbeat_timeout_ms=500"},
              "heartbeat_timeout_ms: must be larger");
}

TEST(JobConfigTest, OverridesChangeValuesAndListsAndNestedMaps) {
  auto job = ParseJobConfig(kMinimal, "test.yaml",
                            {"cluster.servers=5", "train.batch_size=64", "model.top_mlp=[8, 1]",
                             "tables.mlp.optimizer.type=adam", "tables.0.init.scale=0.5"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->cluster.num_servers, 5);
  EXPECT_EQ(job->train.batch_size, 64);
  EXPECT_EQ(job->model.model.dlrm.top_mlp, (std::vector<int>{8, 1}));
  EXPECT_EQ(job->tables[1].optimizer.type, server::OptimizerType::kAdam);
  EXPECT_FLOAT_EQ(job->tables[0].init.scale, 0.5f);
}

TEST(JobConfigTest, MalformedOverrides) {
  ExpectError(kMinimal, {"cluster.servers"}, "expected key.path=value");
  ExpectError(kMinimal, {"tables.nope.dim=3"}, "no element 'nope'");
  ExpectError(kMinimal, {"train.steps=5", "train.steps.x=3"}, "below a plain value");
}

TEST(JobConfigTest, CodecAndConsistencySectionsAreValidated) {
  auto job = ParseJobConfig(kMinimal, "test.yaml",
                            {"tables.mlp.codec.type=topk", "tables.mlp.codec.density=0.01",
                             "tables.mlp.codec.error_feedback=true", "tables.mlp.consistency.mode=ssp",
                             "tables.mlp.consistency.staleness_bound=3", "checkpoint.every_steps=50"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->tables[1].codec.type, "topk");
  EXPECT_TRUE(job->tables[1].codec.error_feedback);
  EXPECT_EQ(job->tables[1].consistency.mode, ConsistencyMode::kSsp);
  EXPECT_EQ(job->tables[1].consistency.staleness_bound, 3);
  EXPECT_EQ(job->checkpoint.every_steps, 50);
  ExpectError(kMinimal, {"tables.mlp.codec.type=zip"}, "tables[1].codec.type: 'zip' is not one of");
  ExpectError(kMinimal, {"tables.mlp.codec.density=0"}, "tables[1].codec.density: value 0 is out of range");
  ExpectError(kMinimal, {"tables.mlp.codec.type=onebit", "tables.mlp.codec.onebit_chunk=0"},
              "tables[1].codec:");
  ExpectError(kMinimal, {"tables.mlp.consistency.mode=eventual"}, "consistency.mode: 'eventual'");
}

// A sparse table's rows go whole: fp16/bf16 casts are accepted, sparsifying codecs and the
// dense-only decorators are refused by name instead of being ignored.
TEST(JobConfigTest, SparseTableCodecIsACastOrNothing) {
  for (const char* type : {"none", "fp16", "bf16"}) {
    auto job = ParseJobConfig(kMinimal, "test.yaml", {std::string("tables.embeddings.codec.type=") + type});
    ASSERT_TRUE(job.ok()) << type << ": " << job.status().ToString();
    EXPECT_EQ(job->tables[0].codec.type, type);
  }
  for (const char* type : {"topk", "randomk", "onebit"}) {
    ExpectError(kMinimal, {std::string("tables.embeddings.codec.type=") + type},
                "tables[0].codec: table 'embeddings' is sparse: its gradient rows are sent whole, so the codec "
                "must be none, fp16 or bf16 (got '" + std::string(type) + "'");
  }
  ExpectError(kMinimal, {"tables.embeddings.codec.type=fp16", "tables.embeddings.codec.error_feedback=true"},
              "error_feedback, dgc_momentum, clip_norm and schedule apply to dense tables only");
  ExpectError(kMinimal, {"tables.embeddings.codec.type=bf16", "tables.embeddings.codec.clip_norm=1"},
              "apply to dense tables only");
  auto pulls = ParseJobConfig(kMinimal, "test.yaml", {"tables.embeddings.pull_codec=bf16"});
  ASSERT_TRUE(pulls.ok()) << pulls.status().ToString();
  EXPECT_EQ(pulls->tables[0].pull_codec, "bf16");
  EXPECT_EQ(pulls->tables[1].pull_codec, "none");
  ExpectError(kMinimal, {"tables.mlp.pull_codec=fp16"},
              "tables[1].pull_codec: table 'mlp' is dense; only sparse tables' rows can be pulled as fp16");
  ExpectError(kMinimal, {"tables.embeddings.pull_codec=topk"}, "tables[0].pull_codec: 'topk' is not one of");
}

TEST(JobConfigTest, WorkerSectionIsValidated) {
  auto job = ParseJobConfig(kMinimal, "test.yaml",
                            {"worker.device=auto", "worker.gpu=1", "worker.nccl=false",
                             "worker.cache.capacity_fraction=0.1", "worker.cache.staleness_bound=3",
                             "worker.precision=bf16", "worker.plan_threads=8", "worker.pull_threads=3", "worker.data_pool_batches=64", "worker.dense_bucket_bytes=524288"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->worker.device, "auto");
  EXPECT_EQ(job->worker.gpu, 1);
  EXPECT_FALSE(job->worker.nccl);
  EXPECT_DOUBLE_EQ(job->worker.cache.capacity_fraction, 0.1);
  EXPECT_EQ(job->worker.cache.staleness_bound, 3);
  EXPECT_EQ(job->worker.precision, "bf16");
  EXPECT_EQ(job->worker.plan_threads, 8);
  EXPECT_EQ(job->worker.pull_threads, 3);
  EXPECT_EQ(job->worker.data_pool_batches, 64);
  ExpectError(kMinimal, {"worker.data_pool_batches=-1"}, "worker.data_pool_batches: value -1 is out of range");
  ExpectError(kMinimal, {"worker.data_pool_batches=8", "data.source=criteo", "data.train_path=/tmp/x.tsv"},
              "worker.data_pool_batches: only synthetic data can be pooled, not data.source 'criteo'");
  ExpectError(kMinimal, {"worker.pull_threads=9"}, "worker.pull_threads: value 9 is out of range");
  EXPECT_EQ(job->worker.dense_bucket_bytes, 524288u);
  ExpectError(kMinimal, {"worker.precision=fp16"}, "worker.precision: 'fp16' is not one of");
  ExpectError(kMinimal, {"worker.plan_threads=0"}, "worker.plan_threads: value 0 is out of range");
  ExpectError(kMinimal, {"worker.dense_bucket_bytes=100"}, "worker.dense_bucket_bytes: value 100 is out of range");
  ExpectError(kMinimal, {"worker.tf32=true"}, "worker.tf32: unknown key");
  ExpectError(kMinimal, {"worker.device=tpu"}, "worker.device: 'tpu' is not one of");
  ExpectError(kMinimal, {"worker.gpu=-2"}, "worker.gpu: value -2 is out of range");
  ExpectError(kMinimal, {"worker.data_threads=0"}, "worker.data_threads: value 0 is out of range");
  ExpectError(kMinimal, {"worker.nccl=maybe"}, "worker.nccl");
  EXPECT_EQ(job->worker.host_allreduce, "nccl");
  auto pinned = ParseJobConfig(kMinimal, "test.yaml", {"cluster.server_cpus=0-1,4", "cluster.worker_cpus=2"});
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned->cluster.server_cpus, "0-1,4");
  ExpectError(kMinimal, {"cluster.worker_cpus=3-1"}, "cluster.worker_cpus: '3-1' is not a range low-high");
  auto ipc = ParseJobConfig(kMinimal, "test.yaml", {"worker.host_allreduce=auto"});
  ASSERT_TRUE(ipc.ok()) << ipc.status().ToString();
  EXPECT_EQ(ipc->worker.host_allreduce, "auto");
  ExpectError(kMinimal, {"worker.host_allreduce=nvls"}, "worker.host_allreduce: 'nvls' is not one of");
  ExpectError(kMinimal, {"worker.host_allreduce=ipc", "worker.nccl=false"},
              "worker.host_allreduce: 'ipc' reduces within the host group, which worker.nccl: false turns off");
  ExpectError(kMinimal, {"worker.cache.capacity_fraction=1.5"}, "worker.cache.capacity_fraction: value 1.5 is out of range");
  ExpectError(kMinimal, {"worker.cache.staleness_bound=-2"}, "worker.cache.staleness_bound: value -2 is out of range");
  ExpectError(kMinimal, {"worker.cache.rows=5"}, "worker.cache.rows: unknown key");
  ExpectError(kMinimal, {"worker.cache.index=gpu"}, "worker.cache.index: 'gpu' is not one of");
  auto host = ParseJobConfig(kMinimal, "test.yaml", {"worker.cache.index=host"});
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_EQ(host->worker.cache.index, "host");
}

TEST(JobConfigTest, MissingFileIsNotFound) {
  auto job = LoadJobConfig("/nonexistent/osprey.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), StatusCode::kNotFound);
  EXPECT_NE(job.status().message().find("/nonexistent/osprey.yaml"), std::string::npos);
}

TEST(JobConfigTest, ShippedConfigsAllLoad) {
  const char* src = osprey::testing::SourceDirFromEnv();
  ASSERT_NE(src, nullptr);
  for (const char* name : {"configs/local.yaml", "configs/local-topk.yaml", "configs/local-onebit.yaml",
                           "configs/bsp.yaml", "configs/ssp.yaml", "configs/async.yaml",
                           "configs/async-momentum.yaml", "configs/bench-dlrm-kaggle.yaml"}) {
    auto job = LoadJobConfig(std::string(src) + "/" + name);
    EXPECT_TRUE(job.ok()) << name << ": " << job.status().ToString();
  }
}

TEST(JobConfigTest, LimitsSectionHasDefaultsAndIsValidated) {
  auto job = ParseJobConfig(kMinimal, "test.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->limits.max_frame_bytes, uint64_t{1} << 30);
  EXPECT_EQ(job->limits.max_keys_per_request, uint64_t{1} << 24);
  EXPECT_EQ(job->limits.max_inflight_per_peer, 4096);
  EXPECT_EQ(job->limits.max_control_frame_bytes, uint64_t{16} << 20);
  auto set = ParseJobConfig(std::string(kMinimal) + "limits:\n  max_frame_bytes: 1048576\n"
                            "  max_keys_per_request: 1000\n  max_inflight_per_peer: 8\n"
                            "  max_held_bytes: 65536\n  max_control_frame_bytes: 1048576\n", "test.yaml");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->limits.max_frame_bytes, 1048576u);
  EXPECT_EQ(set->limits.max_keys_per_request, 1000u);
  EXPECT_EQ(set->limits.max_inflight_per_peer, 8);
  EXPECT_EQ(set->limits.max_held_bytes, 65536u);
  EXPECT_EQ(set->limits.max_control_frame_bytes, 1048576u);
  ExpectError(kMinimal, {"limits.max_control_frame_bytes=10"}, "limits.max_control_frame_bytes");
  ExpectError(kMinimal, {"limits.max_control_frame_bytes=lots"}, "limits.max_control_frame_bytes");
  ExpectError(kMinimal, {"limits.max_inflight_per_peer=0"}, "test.yaml: limits.max_inflight_per_peer");
  ExpectError(kMinimal, {"limits.max_frame_bytes=100"}, "limits.max_frame_bytes");
  ExpectError(kMinimal, {"limits.max_keys=5"}, "limits.max_keys: unknown key");
  ExpectError(kMinimal, {"limits.max_frame_bytes=65536", "limits.max_keys_per_request=10000"},
              "limits.max_keys_per_request: needs a keys frame of 80000 bytes, more than "
              "max_frame_bytes (65536)");
}

// Push parts (worker/client/push_parts.h): client.push_part_bytes, 0 turning them off.
TEST(JobConfigTest, PushPartBytesDefaultsToOneMebibyteAndRejectsBadValues) {
  auto job = ParseJobConfig(kMinimal, "test.yaml", {});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->client.push_part_bytes, uint64_t{1} << 20);
  auto off = ParseJobConfig(kMinimal, "test.yaml", {"client.push_part_bytes=0"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->client.push_part_bytes, 0u);
  ExpectError(kMinimal, {"client.push_part_bytes=-1"}, "client.push_part_bytes");
  ExpectError(kMinimal, {"client.push_part_bytes=2147483648"}, "client.push_part_bytes");
  ExpectError(kMinimal, {"client.push_part_bytes=big"}, "client.push_part_bytes");
}

// Pull parts (worker/client/push_parts.h, "Pulls in parts"): client.pull_part_bytes, 0 off.
TEST(JobConfigTest, PullPartBytesDefaultsToOneMebibyteAndRejectsBadValues) {
  auto job = ParseJobConfig(kMinimal, "test.yaml", {});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->client.pull_part_bytes, uint64_t{1} << 20);
  auto set = ParseJobConfig(kMinimal, "test.yaml", {"client.pull_part_bytes=0", "client.push_part_bytes=4096"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->client.pull_part_bytes, 0u);
  EXPECT_EQ(set->client.push_part_bytes, 4096u);  // the two are separate settings
  ExpectError(kMinimal, {"client.pull_part_bytes=-1"}, "client.pull_part_bytes");
  ExpectError(kMinimal, {"client.pull_part_bytes=2147483648"}, "client.pull_part_bytes");
  ExpectError(kMinimal, {"client.pull_part_bytes=1.5"}, "client.pull_part_bytes");
}

// client.receive_in_wait (worker/client/client.h): on by default, a boolean.
TEST(JobConfigTest, ReceiveInWaitDefaultsToOnAndTakesOnlyABoolean) {
  auto job = ParseJobConfig(kMinimal, "test.yaml", {});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_TRUE(job->client.receive_in_wait);
  auto off = ParseJobConfig(kMinimal, "test.yaml", {"client.receive_in_wait=false"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->client.receive_in_wait);
  ExpectError(kMinimal, {"client.receive_in_wait=sometimes"}, "client.receive_in_wait");
}

// worker.check_pulls (worker/gpu/step_checks.cc): off by default, a boolean.
TEST(JobConfigTest, CheckPullsDefaultsToOffAndTakesOnlyABoolean) {
  auto job = ParseJobConfig(kMinimal, "test.yaml", {});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_FALSE(job->worker.check_pulls);
  auto on = ParseJobConfig(kMinimal, "test.yaml", {"worker.check_pulls=true"});
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->worker.check_pulls);
  ExpectError(kMinimal, {"worker.check_pulls=2"}, "worker.check_pulls");
}

// The threads a server spreads a merged window's apply over (server/apply_pool.h).
TEST(JobConfigTest, ServerApplyThreadsDefaultsToOneAndRejectsBadValues) {
  auto job = ParseJobConfig(kMinimal, "test.yaml", {});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->cluster.server_apply_threads, 1);
  auto two = ParseJobConfig(kMinimal, "test.yaml", {"cluster.server_apply_threads=2"});
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->cluster.server_apply_threads, 2);
  ExpectError(kMinimal, {"cluster.server_apply_threads=0"}, "cluster.server_apply_threads");
  ExpectError(kMinimal, {"cluster.server_apply_threads=65"}, "cluster.server_apply_threads");
  ExpectError(kMinimal, {"cluster.server_apply_threads=two"}, "cluster.server_apply_threads");
}

// GPU device-side dense compression: worker.encode_on (worker/gpu/device_encoder.h).
TEST(JobConfigTest, EncodeOnIsAutoDeviceOrHost) {
  auto job = ParseJobConfig(kMinimal, "test.yaml", {});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->worker.encode_on, "auto");
  job = ParseJobConfig(kMinimal, "test.yaml", {"worker.encode_on=host"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->worker.encode_on, "host");
  ExpectError(kMinimal, {"worker.encode_on=gpu"}, "worker.encode_on: 'gpu' is not one of");
}

}  // namespace
}  // namespace osprey::config
