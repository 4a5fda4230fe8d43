// Convergence of the three consistency modes (issue 3): an in-process cluster (2 servers, 2
// training workers in threads over the in-process transport) trains configs/local.yaml's DLRM on
// the planted synthetic data with both tables in bsp, in ssp (staleness_bound 4, lr_scale inverse,
// momentum_decay) and in async (apply per push, lr_scale inverse), the same number of samples in
// each (train.steps per worker x 2 workers x batch_size). ssp and async must reach an AUC on the
// same held-out samples within kTolerance of bsp's.
//
// momentum_decay is set in ssp as the issue asks, but with local.yaml's optimizers (adagrad) it
// changes nothing: TableShard computes ApplyOptions.momentum_scale, and the adagrad step has no
// momentum term to scale (server/optim/optimizer.cc).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "job/job_config.h"
#include "tests/testing/inproc_training.h"
#include "tests/testing/test_env.h"
#include "worker/client/client.h"
#include "worker/trainer.h"

namespace osprey {
namespace {

constexpr int kWorkers = 2;
// Per worker. The gap to bsp shrinks with training: async does twice bsp's optimizer steps per
// sample (one per push vs one per clock) and ssp in between, which shows while the model is still
// far from converged. Measured on 2 cores (|AUC - bsp AUC|, worst of the runs):
//   400 steps (7 runs):  ssp 0.0053, async 0.0032  -> fails the 0.002
//   1000 steps (8 runs): ssp 0.0019, async 0.0014  -> passes with no margin
//   1500 steps (6 runs): ssp 0.0015, async 0.0013
//   2000 steps (10 runs, 2 under ctest -j2): ssp 0.0011, async 0.0011  (about 30 s)
constexpr int kSteps = 2000;
constexpr double kTolerance = 0.002;

struct ModeResult {
  double auc = std::nan("");
  double oracle_auc = std::nan("");
  uint64_t samples = 0;
  uint64_t pushes_applied = 0;
  uint64_t windows_applied = 0;
  uint64_t pushes_dropped = 0;
};

// `consistency` entries ("mode=ssp", ...) are applied to both tables.
void Train(const std::vector<std::string>& consistency, ModeResult* out) {
  const char* src = testing::SourceDirFromEnv();
  ASSERT_NE(src, nullptr);
  std::vector<std::string> overrides = {"train.eval_samples=20000",
                                        "train.steps=" + std::to_string(kSteps)};
  for (const char* table : {"embeddings", "mlp"}) {
    for (const auto& c : consistency) {
      overrides.push_back(std::string("tables.") + table + ".consistency." + c);
    }
  }
  auto job = config::LoadJobConfig(std::string(src) + "/configs/local.yaml", overrides);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  testing::InprocTraining training(*job, /*servers=*/2, kWorkers);
  Status init = training.Init();
  ASSERT_TRUE(init.ok()) << init.ToString();
  Status run = training.RunAll();
  ASSERT_TRUE(run.ok()) << run.ToString();
  for (int r = 0; r < kWorkers; ++r) {
    ASSERT_EQ(training.trainer(r).progress().step, kSteps);
    out->samples += training.trainer(r).progress().samples;
  }
  // ssp: a last partial window closes on its merge_window_us timer (2 ms); let it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto eval = training.trainer(0).Evaluate();
  ASSERT_TRUE(eval.ok()) << eval.status().ToString();
  ASSERT_EQ(eval->samples, 20000u);
  out->auc = eval->auc;
  out->oracle_auc = eval->oracle_auc;
  for (int s = 0; s < 2; ++s) {
    auto st = training.cluster().server(s).stats();
    EXPECT_EQ(st.bad_requests, 0u);
    out->pushes_applied += st.pushes_applied;
    out->windows_applied += st.windows_applied;
    out->pushes_dropped += st.pushes_dropped;
  }
}

void Print(const char* mode, const ModeResult& r) {
  std::printf("%-5s AUC %.5f oracle %.5f samples %llu pushes %llu windows %llu dropped %llu\n",
              mode, r.auc, r.oracle_auc, static_cast<unsigned long long>(r.samples),
              static_cast<unsigned long long>(r.pushes_applied),
              static_cast<unsigned long long>(r.windows_applied),
              static_cast<unsigned long long>(r.pushes_dropped));
  std::fflush(stdout);
}

TEST(ModesConvergenceTest, SspAndAsyncReachBspAucAfterTheSameSamples) {
  ModeResult bsp, ssp, async;
  ASSERT_NO_FATAL_FAILURE(Train({"mode=bsp", "merge_reduce=mean"}, &bsp));
  Print("bsp", bsp);
  ASSERT_NO_FATAL_FAILURE(
      Train({"mode=ssp", "staleness_bound=4", "merge_max_pushes=2", "merge_window_us=2000",
             "merge_reduce=mean", "lr_scale=inverse", "momentum_decay=true"},
            &ssp));
  Print("ssp", ssp);
  ASSERT_NO_FATAL_FAILURE(Train({"mode=async", "merge_max_pushes=1", "lr_scale=inverse"}, &async));
  Print("async", async);

  const uint64_t samples = static_cast<uint64_t>(kWorkers) * kSteps * 256;
  EXPECT_EQ(bsp.samples, samples);
  EXPECT_EQ(ssp.samples, samples);
  EXPECT_EQ(async.samples, samples);
  // bsp learned the planted model at all (otherwise "within 0.002 of bsp" means nothing).
  EXPECT_GT(bsp.auc, 0.9 * bsp.oracle_auc) << "bsp AUC " << bsp.auc << " oracle " << bsp.oracle_auc;
  EXPECT_EQ(ssp.pushes_dropped + async.pushes_dropped, 0u);
  EXPECT_NEAR(ssp.auc, bsp.auc, kTolerance) << "ssp " << ssp.auc << " bsp " << bsp.auc;
  EXPECT_NEAR(async.auc, bsp.auc, kTolerance) << "async " << async.auc << " bsp " << bsp.auc;
}

}  // namespace
}  // namespace osprey
