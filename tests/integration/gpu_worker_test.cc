// The GPU worker through the real binaries (`osprey launch`, separate processes): it must learn
// what the CPU worker learns from the same samples, its row cache with staleness bound 0 must be
// the uncached run, a cache with a bound must hit and still converge, and bad GPU settings must
// fail with a message naming the problem. Tests that need a GPU skip when the worker reports that
// none is visible (or that it was built without CUDA); `worker.device: auto` must work everywhere.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/testing/launch_util.h"

namespace {

using osprey::testing::BinDir;
using osprey::testing::JsonNumber;
using osprey::testing::ReadFile;
using osprey::testing::SourceDir;

struct Launch {
  int rc = -1;
  std::string json;    // --report-json
  std::string output;  // launcher stdout + stderr
  std::string logs;    // log dir
  std::string worker0;  // worker-0.log
};

// One job of configs/local.yaml with 1 worker and the given extra --set flags.
Launch LaunchJob(const std::string& name, const std::string& sets) {
  Launch l;
  l.logs = ::testing::TempDir() + "/gpu-worker-" + name;
  std::string report = l.logs + ".json", out = l.logs + ".out";
  std::remove(report.c_str());
  std::string cmd = BinDir() + "/osprey launch " + SourceDir() + "/configs/local.yaml --quiet --log-dir " + l.logs +
                    " --report-json " + report + " --set cluster.workers=1 " + sets + " > " + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  l.rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  l.json = ReadFile(report);
  l.output = ReadFile(out);
  l.worker0 = ReadFile(l.logs + "/worker-0.log");
  return l;
}

// Any worker's log may say so: with two workers the launcher stops the job when the first one
// fails, which may be before the other has written its own message.
bool NoGpu(const Launch& l) {
  for (const std::string& log : {l.worker0, ReadFile(l.logs + "/worker-1.log")}) {
    if (log.find("no CUDA device is visible") != std::string::npos ||
        log.find("built without CUDA") != std::string::npos) {
      return true;
    }
  }
  return false;
}

#define SKIP_WITHOUT_GPU(launch)                                                      \
  if (NoGpu(launch)) GTEST_SKIP() << "no usable GPU here: " << (launch).logs;         \
  ASSERT_EQ((launch).rc, 0) << (launch).output << "\n" << (launch).worker0

const char* kBsp = " --set tables.0.consistency.mode=bsp --set tables.1.consistency.mode=bsp";

TEST(GpuWorkerTest, ReachesTheCpuWorkersAucOnTheSameSamples) {
  Launch gpu = LaunchJob("gpu-bsp", std::string(kBsp) + " --set worker.device=cuda");
  SKIP_WITHOUT_GPU(gpu);
  Launch cpu = LaunchJob("cpu-bsp", std::string(kBsp) + " --set worker.device=cpu");
  ASSERT_EQ(cpu.rc, 0) << cpu.output;
  EXPECT_NE(gpu.json.find("\"device\": \"cuda:"), std::string::npos) << gpu.json;
  EXPECT_EQ(JsonNumber(gpu.json, "steps"), JsonNumber(cpu.json, "steps"));
  double a_gpu = JsonNumber(gpu.json, "auc"), a_cpu = JsonNumber(cpu.json, "auc");
  EXPECT_NEAR(a_gpu, a_cpu, 0.002) << "gpu " << gpu.json << "\ncpu " << cpu.json;
  EXPECT_GT(a_gpu, 0.9 * JsonNumber(gpu.json, "oracle_auc"));
}

TEST(GpuWorkerTest, CacheWithStalenessBoundZeroIsTheUncachedRun) {
  Launch plain = LaunchJob("gpu-nocache", std::string(kBsp) + " --set worker.device=cuda");
  SKIP_WITHOUT_GPU(plain);
  // A cache of 10% of the key space with bound 0: slots and evictions change, values must not.
  Launch cached = LaunchJob("gpu-cache0", std::string(kBsp) +
                                        " --set worker.device=cuda --set worker.cache.capacity_fraction=0.1"
                                        " --set worker.cache.staleness_bound=0");
  ASSERT_EQ(cached.rc, 0) << cached.output << cached.worker0;
  EXPECT_EQ(JsonNumber(cached.json, "cache_hits"), 0) << cached.json;
  EXPECT_EQ(JsonNumber(cached.json, "rows_pulled"), JsonNumber(plain.json, "rows_pulled"));
  EXPECT_GT(JsonNumber(cached.json, "cache_evictions"), 0) << "the cache was large enough to never evict";
  // Row gradients are summed with atomics on the GPU (order not fixed), so runs differ in the
  // last bits; the models must agree far tighter than any real change would.
  EXPECT_NEAR(JsonNumber(cached.json, "auc"), JsonNumber(plain.json, "auc"), 0.001);
  EXPECT_NEAR(JsonNumber(cached.json, "logloss"), JsonNumber(plain.json, "logloss"), 0.001);
  // The same with the index planned on the host (worker.cache.index host), and the uncached run
  // through the host index: both indexes are the uncached run.
  Launch host = LaunchJob("gpu-cache0-host", std::string(kBsp) +
                                               " --set worker.device=cuda --set worker.cache.capacity_fraction=0.1"
                                               " --set worker.cache.staleness_bound=0 --set worker.cache.index=host");
  ASSERT_EQ(host.rc, 0) << host.output << host.worker0;
  EXPECT_NE(host.worker0.find("host index"), std::string::npos) << host.worker0;
  EXPECT_NE(cached.worker0.find("device index"), std::string::npos) << cached.worker0;
  EXPECT_EQ(JsonNumber(host.json, "cache_hits"), 0) << host.json;
  EXPECT_EQ(JsonNumber(host.json, "rows_pulled"), JsonNumber(plain.json, "rows_pulled"));
  EXPECT_NEAR(JsonNumber(host.json, "auc"), JsonNumber(plain.json, "auc"), 0.001);
  EXPECT_NEAR(JsonNumber(host.json, "logloss"), JsonNumber(plain.json, "logloss"), 0.001);
}

TEST(GpuWorkerTest, CacheWithBoundHitsEvictsAndConverges) {
  Launch plain = LaunchJob("gpu-async", " --set worker.device=cuda");
  SKIP_WITHOUT_GPU(plain);
  Launch cached = LaunchJob("gpu-async-cache", " --set worker.device=cuda --set worker.cache.capacity_rows=20000"
                                         " --set worker.cache.staleness_bound=4");
  ASSERT_EQ(cached.rc, 0) << cached.output << cached.worker0;
  EXPECT_GT(JsonNumber(cached.json, "cache_hit_rate"), 0.3) << cached.json;
  EXPECT_GT(JsonNumber(cached.json, "cache_evictions"), 0) << cached.json;
  EXPECT_LT(JsonNumber(cached.json, "rows_pulled"), 0.7 * JsonNumber(plain.json, "rows_pulled"));
  EXPECT_NEAR(JsonNumber(cached.json, "auc"), JsonNumber(plain.json, "auc"), 0.01) << cached.json;
  // The host index under the same bound: hits as well, converges as well.
  Launch host = LaunchJob("gpu-async-cache-host", " --set worker.device=cuda --set worker.cache.capacity_rows=20000"
                                               " --set worker.cache.staleness_bound=4 --set worker.cache.index=host");
  ASSERT_EQ(host.rc, 0) << host.output << host.worker0;
  EXPECT_GT(JsonNumber(host.json, "cache_hit_rate"), 0.3) << host.json;
  EXPECT_NEAR(JsonNumber(host.json, "auc"), JsonNumber(plain.json, "auc"), 0.01) << host.json;
}

TEST(GpuWorkerTest, PrefetchOffGivesTheSameModelInBsp) {
  Launch on = LaunchJob("gpu-prefetch-on", std::string(kBsp) + " --set worker.device=cuda");
  SKIP_WITHOUT_GPU(on);
  Launch off = LaunchJob("gpu-prefetch-off", std::string(kBsp) + " --set worker.device=cuda --set worker.prefetch=false");
  ASSERT_EQ(off.rc, 0) << off.output << off.worker0;
  EXPECT_NEAR(JsonNumber(on.json, "auc"), JsonNumber(off.json, "auc"), 0.001);
  EXPECT_EQ(JsonNumber(on.json, "rows_pulled"), JsonNumber(off.json, "rows_pulled"));
}

TEST(GpuWorkerTest, BadGpuSettingsFailWithAClearMessage) {
  Launch probe = LaunchJob("gpu-probe", " --set worker.device=cuda --set train.steps=5 --set train.eval_samples=0");
  SKIP_WITHOUT_GPU(probe);
  Launch missing = LaunchJob("gpu-missing", " --set worker.device=cuda --set worker.gpu=1000 --set train.steps=5");
  EXPECT_NE(missing.rc, 0);
  EXPECT_NE(missing.worker0.find("worker.gpu: device 1000 does not exist"), std::string::npos) << missing.worker0;
  // 2^31 - 1 rows of 16 floats = 128 GiB: more than any GPU here has free.
  Launch huge = LaunchJob("gpu-huge-cache", " --set worker.device=cuda --set worker.cache.capacity_rows=2147483647"
                                      " --set train.steps=5");
  EXPECT_NE(huge.rc, 0);
  EXPECT_NE(huge.worker0.find("worker.cache: 2147483647 rows x 16 floats"), std::string::npos) << huge.worker0;
}

// Small dense chunks (25 over the 2 servers) and buckets of 2 chunks (13 buckets), so the dense
// gradient really is split: backward hands out many buckets, and in a host group each rank owns
// the chunks of one server.
const char* kSmallBuckets = " --set tables.1.chunk_floats=1024 --set worker.dense_bucket_bytes=8192";

// Buckets only change when gradients are copied and pushed, not their values; nor does the
// number of puller threads.
TEST(GpuWorkerTest, SmallDenseBucketsAndThreePullersGiveTheSameModelInBsp) {
  Launch one = LaunchJob("gpu-bucket-one", std::string(kBsp) + " --set worker.device=cuda --set tables.1.chunk_floats=1024"
                                          " --set worker.dense_bucket_bytes=1048576");
  SKIP_WITHOUT_GPU(one);
  Launch many = LaunchJob("gpu-bucket-many", std::string(kBsp) + kSmallBuckets +
                                           " --set worker.device=cuda --set worker.pull_threads=3");
  ASSERT_EQ(many.rc, 0) << many.output << many.worker0;
  EXPECT_NE(one.worker0.find("dense gradient in 1 bucket(s)"), std::string::npos) << one.worker0;
  EXPECT_NE(many.worker0.find("dense gradient in 13 bucket(s) of 8 KiB"), std::string::npos) << many.worker0;
  EXPECT_NEAR(JsonNumber(one.json, "auc"), JsonNumber(many.json, "auc"), 0.001);
  EXPECT_NEAR(JsonNumber(one.json, "logloss"), JsonNumber(many.json, "logloss"), 0.001);
}

// worker.check_pulls finds every pulled and gathered value written in a correct run -- eight
// pullers (ten steps in flight) with the device index and a cache that evicts -- and the checks
// change no value: the run is the unchecked one.
TEST(GpuWorkerTest, CheckPullsFindsEveryValueWrittenWithEightPullers) {
  const std::string sets = std::string(kBsp) + " --set worker.device=cuda --set worker.cache.capacity_fraction=0.1"
                           " --set worker.cache.staleness_bound=0 --set worker.pull_threads=8";
  Launch plain = LaunchJob("gpu-check-off", sets + " --set worker.cache.index=host");
  SKIP_WITHOUT_GPU(plain);
  Launch checked = LaunchJob("gpu-check-on", sets + " --set worker.cache.index=host --set worker.check_pulls=true");
  ASSERT_EQ(checked.rc, 0) << checked.output << checked.worker0;
  EXPECT_EQ(checked.worker0.find("check_pulls"), std::string::npos) << checked.worker0;
  EXPECT_EQ(JsonNumber(checked.json, "rows_pulled"), JsonNumber(plain.json, "rows_pulled"));
  EXPECT_NEAR(JsonNumber(checked.json, "logloss"), JsonNumber(plain.json, "logloss"), 0.001);
}

// Dense top-k encoded on the device (worker/gpu/device_encoder.h) sends the frames the host
// compressor sends for the same gradients (tests/worker/device_encoder_test.cc checks the bytes),
// so in bsp the run must be the host-encoded run; the worker's log says where it encoded.
TEST(GpuWorkerTest, DenseTopKEncodedOnTheDeviceIsTheHostEncodedRun) {
  for (const char* granularity : {"tensor", "layer"}) {
    SCOPED_TRACE(granularity);
    const std::string topk = std::string(kBsp) +
                             " --set worker.device=cuda --set train.steps=300 --set tables.1.chunk_floats=1024"
                             " --set tables.1.codec.type=topk --set tables.1.codec.density=0.05"
                             " --set tables.1.codec.error_feedback=true --set tables.1.codec.min_compress_bytes=4096"
                             " --set tables.1.codec.granularity=" + granularity;
    Launch device = LaunchJob(std::string("gpu-encode-device-") + granularity, topk + " --set worker.encode_on=device");
    SKIP_WITHOUT_GPU(device);
    Launch host = LaunchJob(std::string("gpu-encode-host-") + granularity, topk + " --set worker.encode_on=host");
    ASSERT_EQ(host.rc, 0) << host.output << host.worker0;
    EXPECT_NE(device.worker0.find("dense gradient encoded on the device"), std::string::npos) << device.worker0;
    EXPECT_NE(host.worker0.find("dense gradient encoded on the host: worker.encode_on = host"), std::string::npos)
        << host.worker0;
    // Not bit for bit: the GPU sums row gradients with atomics, so two GPU runs of one config
    // differ in the last bits and top-k near-ties may fall either way (an H100 run was 0.00108
    // apart on layer granularity, three reruns within 0.001).
    EXPECT_NEAR(JsonNumber(device.json, "auc"), JsonNumber(host.json, "auc"), 0.002);
    EXPECT_NEAR(JsonNumber(device.json, "logloss"), JsonNumber(host.json, "logloss"), 0.002);
  }
}

TEST(GpuWorkerTest, EncodeOnDeviceWithACodecItCannotEncodeIsAClearError) {
  Launch l = LaunchJob("gpu-encode-onebit", " --set worker.device=cuda --set train.steps=5 --set train.eval_samples=0"
                                            " --set tables.1.codec.type=onebit --set worker.encode_on=device");
  if (NoGpu(l)) GTEST_SKIP() << "no usable GPU here: " << l.logs;
  EXPECT_NE(l.rc, 0);
  EXPECT_NE((l.output + l.worker0).find("worker.encode_on = device"), std::string::npos) << l.output << l.worker0;
}

// A pool as large as the run serves step t batch t % pool = t: exactly the fresh stream.
TEST(GpuWorkerTest, DataPoolAsLongAsTheRunIsTheFreshStream) {
  Launch fresh = LaunchJob("gpu-fresh", std::string(kBsp) + " --set worker.device=cuda");
  SKIP_WITHOUT_GPU(fresh);
  Launch pooled = LaunchJob("gpu-pool", std::string(kBsp) + " --set worker.device=cuda --set worker.data_pool_batches=1000");
  ASSERT_EQ(pooled.rc, 0) << pooled.output << pooled.worker0;
  EXPECT_NEAR(JsonNumber(pooled.json, "auc"), JsonNumber(fresh.json, "auc"), 0.001);
  EXPECT_NEAR(JsonNumber(pooled.json, "logloss"), JsonNumber(fresh.json, "logloss"), 0.001);
  EXPECT_EQ(JsonNumber(pooled.json, "rows_pulled"), JsonNumber(fresh.json, "rows_pulled"));
}

// bf16 rows on the wire: the GPU worker casts its row gradients on the device and widens the
// pulled rows there, so half the bytes cross PCIe either way, with the bits the host makes
// (cuda::CastRowValues / ScatterRowsWiden against codec::CastRowValues / WidenRowValues,
// gpu_sparse_test): the job trains as with the casts on the host.
TEST(GpuWorkerTest, Bf16RowsCastOnTheDeviceTrainLikeTheHostCast) {
  const std::string rows = std::string(kBsp) + " --set tables.0.codec.type=bf16 --set tables.0.pull_codec=bf16";
  Launch device = LaunchJob("gpu-rows-device", rows + " --set worker.device=cuda");
  SKIP_WITHOUT_GPU(device);
  Launch host = LaunchJob("gpu-rows-host", rows + " --set worker.device=cuda --set worker.encode_on=host");
  ASSERT_EQ(host.rc, 0) << host.output << host.worker0;
  EXPECT_NE(device.worker0.find("row gradients cast to bf16 on the device"), std::string::npos) << device.worker0;
  EXPECT_NE(device.worker0.find("pulled rows widened from bf16 on the device"), std::string::npos) << device.worker0;
  EXPECT_EQ(host.worker0.find("row gradients cast"), std::string::npos) << host.worker0;
  EXPECT_EQ(host.worker0.find("pulled rows widened"), std::string::npos) << host.worker0;
  EXPECT_NEAR(JsonNumber(device.json, "auc"), JsonNumber(host.json, "auc"), 0.002) << device.json << host.json;
  EXPECT_GT(JsonNumber(device.json, "auc"), 0.9 * JsonNumber(device.json, "oracle_auc")) << device.json;
}

// bf16 MLP products (fp32 accumulation, fp32 master weights on the servers) must train as well as
// tf32 on the planted data.
TEST(GpuWorkerTest, Bf16MlpsTrainLikeTf32) {
  Launch tf32 = LaunchJob("gpu-tf32", std::string(kBsp) + " --set worker.device=cuda --set worker.precision=tf32");
  SKIP_WITHOUT_GPU(tf32);
  Launch bf16 = LaunchJob("gpu-bf16", std::string(kBsp) + " --set worker.device=cuda --set worker.precision=bf16");
  ASSERT_EQ(bf16.rc, 0) << bf16.output << bf16.worker0;
  EXPECT_NE(bf16.worker0.find("(bf16 MLPs)"), std::string::npos) << bf16.worker0;
  EXPECT_NEAR(JsonNumber(bf16.json, "auc"), JsonNumber(tf32.json, "auc"), 0.005) << bf16.json;
  EXPECT_GT(JsonNumber(bf16.json, "auc"), 0.9 * JsonNumber(bf16.json, "oracle_auc")) << bf16.json;
}

// Two GPU workers on one host form an NCCL host group: each dense bucket is reduced (averaged) to
// the owners of its chunks, each rank pushes and pulls only its server's chunks, and the
// parameters are all-gathered by broadcast. In bsp that is exactly the CPU job's window mean over
// both workers' pushes, so the models must agree as closely as two CPU runs do.
TEST(GpuWorkerTest, TwoGpuHostGroupMatchesTheCpuJobInBsp) {
  Launch gpu = LaunchJob("gpu2-bsp", std::string(kBsp) + kSmallBuckets + " --set cluster.workers=2 --set worker.device=cuda");
  SKIP_WITHOUT_GPU(gpu);
  // worker-i.log is the launcher's i-th process; ranks follow registration order.
  std::string logs = gpu.worker0 + ReadFile(gpu.logs + "/worker-1.log");
  if (logs.find("share 1 visible GPUs") != std::string::npos) GTEST_SKIP() << "needs 2 GPUs";
  EXPECT_NE(logs.find("NCCL host group, local rank 0 of 2; pushes and pulls the dense chunks of 1 of 2 servers"),
            std::string::npos) << logs;
  EXPECT_NE(logs.find("NCCL host group, local rank 1 of 2"), std::string::npos) << logs;
  EXPECT_NE(logs.find("reduced to their owners over NCCL"), std::string::npos) << logs;
  EXPECT_GT(JsonNumber(gpu.json, "time_nccl"), 0) << gpu.json;
  Launch cpu = LaunchJob("cpu2-bsp", std::string(kBsp) + kSmallBuckets + " --set cluster.workers=2 --set worker.device=cpu");
  ASSERT_EQ(cpu.rc, 0) << cpu.output;
  EXPECT_NEAR(JsonNumber(gpu.json, "auc"), JsonNumber(cpu.json, "auc"), 0.002) << gpu.json << "\n" << cpu.json;
}

// worker.host_allreduce ipc and auto (issue 19): the buckets reduced by the CUDA IPC allreduce
// (every bucket, or those the start-up calibration gives it) average to the same bits as NCCL's
// reduce for two ranks, so the bsp job still matches the CPU job.
TEST(GpuWorkerTest, TwoGpuHostGroupOverIpcMatchesTheCpuJobInBsp) {
  Launch cpu;
  for (const std::string mode : {"ipc", "auto"}) {
    Launch gpu = LaunchJob("gpu2-bsp-" + mode, std::string(kBsp) + kSmallBuckets +
                                                   " --set cluster.workers=2 --set worker.device=cuda"
                                                   " --set worker.host_allreduce=" + mode);
    SKIP_WITHOUT_GPU(gpu);
    std::string logs = gpu.worker0 + ReadFile(gpu.logs + "/worker-1.log");
    if (logs.find("share 1 visible GPUs") != std::string::npos) GTEST_SKIP() << "needs 2 GPUs";
    if (logs.find("keeps NCCL for every bucket") != std::string::npos) GTEST_SKIP() << "no peer access: " << logs;
    EXPECT_NE(logs.find("reduce by " + std::string(mode == "ipc" ? "ipc" : "auto:")), std::string::npos) << logs;
    if (cpu.json.empty()) {
      cpu = LaunchJob("cpu2-bsp-ipc", std::string(kBsp) + kSmallBuckets + " --set cluster.workers=2 --set worker.device=cpu");
      ASSERT_EQ(cpu.rc, 0) << cpu.output;
    }
    EXPECT_NEAR(JsonNumber(gpu.json, "auc"), JsonNumber(cpu.json, "auc"), 0.002) << mode << "\n" << gpu.json;
  }
}

// In async the host group applies one averaged dense step per host step where two CPU workers
// apply two, so the runs differ by design; it must still train well.
TEST(GpuWorkerTest, TwoGpuHostGroupTrainsInAsync) {
  Launch gpu = LaunchJob("gpu2-async", " --set cluster.workers=2 --set worker.device=cuda");
  SKIP_WITHOUT_GPU(gpu);
  std::string logs = gpu.worker0 + ReadFile(gpu.logs + "/worker-1.log");
  if (logs.find("share 1 visible GPUs") != std::string::npos) GTEST_SKIP() << "needs 2 GPUs";
  EXPECT_NE(logs.find("NCCL host group, local rank 1 of 2"), std::string::npos) << logs;
  EXPECT_GT(JsonNumber(gpu.json, "auc"), 0.9 * JsonNumber(gpu.json, "oracle_auc")) << gpu.json;
}

// Runs everywhere: with a GPU it trains there, without one it says so and trains on the CPU.
TEST(GpuWorkerTest, DeviceAutoTrainsWithOrWithoutAGpu) {
  Launch l = LaunchJob("auto", " --set worker.device=auto --set train.steps=300");
  ASSERT_EQ(l.rc, 0) << l.output << l.worker0;
  bool on_gpu = l.json.find("\"device\": \"cuda:") != std::string::npos;
  if (!on_gpu) {
    EXPECT_NE(l.worker0.find("training on the CPU"), std::string::npos) << l.worker0;
    EXPECT_NE(l.json.find("\"device\": \"cpu\""), std::string::npos) << l.json;
  }
  EXPECT_GT(JsonNumber(l.json, "auc"), 0.7) << l.json;
}

// A build or machine without a GPU must refuse device cuda, naming why, before training.
TEST(GpuWorkerTest, DeviceCudaWithoutAGpuIsAClearError) {
  Launch l = LaunchJob("cuda-nogpu", " --set worker.device=cuda --set train.steps=5 --set train.eval_samples=0");
  if (!NoGpu(l)) GTEST_SKIP() << "this machine has a usable GPU";
  EXPECT_NE(l.rc, 0);
  EXPECT_NE(l.worker0.find("worker.device cuda: "), std::string::npos) << l.worker0;
}

}  // namespace
