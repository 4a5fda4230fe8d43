// Convergence with compressed dense pushes: the in-process cluster of inproc_cluster_test (2
// servers, configs/local.yaml, the same seeds, one worker) trained on the same samples with the
// MLP gradients uncompressed, top-1% with and without error feedback, and 1-bit with error
// feedback. Each run is compared with the uncompressed one on the same held-out samples.
#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "job/job_config.h"
#include "tests/testing/inproc_training.h"
#include "tests/testing/test_env.h"
#include "worker/client/client.h"
#include "worker/trainer.h"

namespace osprey {
namespace {

// One worker: its pushes and pulls reach each server in program order, so a run is bit-for-bit
// repeatable and two runs differ only by their codec. With two async workers the interleaving
// of pushes alone moves the uncompressed AUC by ~0.001 between identical runs (measured:
// 0.7766 vs 0.7754), as much as the tolerance under test.
constexpr int kWorkers = 1;

struct RunResult {
  worker::EvalResult eval;
  worker::CompressionStats comp;  // summed over workers; last_density is worker 0's
  uint64_t frames_decoded = 0;    // compressed frames the servers decoded
  uint64_t bytes_encoded = 0;     // their values-frame bytes ...
  uint64_t bytes_decoded = 0;     // ... and the fp32 bytes they decoded to
};

// Trains configs/local.yaml with `overrides` on an in-process cluster and evaluates worker 0.
RunResult Train(const std::vector<std::string>& overrides) {
  RunResult out;
  const char* src = testing::SourceDirFromEnv();
  EXPECT_NE(src, nullptr);
  if (src == nullptr) return out;
  std::vector<std::string> sets = {"train.eval_samples=10000", "train.steps=1000"};
  sets.insert(sets.end(), overrides.begin(), overrides.end());
  auto job = config::LoadJobConfig(std::string(src) + "/configs/local.yaml", sets);
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  if (!job.ok()) return out;
  testing::InprocTraining training(*job, /*servers=*/2, kWorkers);
  Status init = training.Init();
  EXPECT_TRUE(init.ok()) << init.ToString();
  if (!init.ok()) return out;
  Status run = training.RunAll();
  EXPECT_TRUE(run.ok()) << run.ToString();
  auto eval = training.trainer(0).Evaluate();
  EXPECT_TRUE(eval.ok()) << eval.status().ToString();
  if (eval.ok()) out.eval = *eval;
  for (int r = 0; r < kWorkers; ++r) {
    worker::CompressionStats c = training.trainer(r).compression_stats();
    out.comp.messages += c.messages;
    out.comp.compressed_messages += c.compressed_messages;
    out.comp.bytes_raw += c.bytes_raw;
    out.comp.bytes_encoded += c.bytes_encoded;
    out.comp.encode_seconds += c.encode_seconds;
    if (r == 0) out.comp.last_density = c.last_density;
  }
  for (int s = 0; s < 2; ++s) {
    out.frames_decoded += training.cluster().server(s).decode_stats().frames.load();
    out.bytes_encoded += training.cluster().server(s).decode_stats().bytes_encoded.load();
    out.bytes_decoded += training.cluster().server(s).decode_stats().bytes_decoded.load();
    EXPECT_EQ(training.cluster().server(s).stats().bad_requests, 0u);
  }
  return out;
}

void Print(const char* name, const RunResult& r) {
  std::printf("%-12s AUC %.4f logloss %.4f  dense %llu -> %llu B, encode %.1f ms, last density %.4f\n",
              name, r.eval.auc, r.eval.logloss, static_cast<unsigned long long>(r.comp.bytes_raw),
              static_cast<unsigned long long>(r.comp.bytes_encoded), r.comp.encode_seconds * 1e3,
              r.comp.last_density);
}

const char* kCodec = "tables.mlp.codec.";

std::vector<std::string> TopK(bool error_feedback) {
  return {std::string(kCodec) + "type=topk", std::string(kCodec) + "density=0.01",
          std::string(kCodec) + "min_compress_bytes=4096",
          std::string(kCodec) + "error_feedback=" + (error_feedback ? "true" : "false")};
}

TEST(CompressionConvergenceTest, ErrorFeedbackKeepsTheUncompressedAuc) {
  RunResult none = Train({});
  Print("none", none);
  RunResult topk = Train(TopK(true));
  Print("topk1%+EF", topk);
  RunResult topk_no_ef = Train(TopK(false));
  Print("topk1%", topk_no_ef);
  RunResult onebit = Train({std::string(kCodec) + "type=onebit", std::string(kCodec) + "onebit_chunk=1024",
                            std::string(kCodec) + "min_compress_bytes=4096",
                            std::string(kCodec) + "error_feedback=true"});
  Print("onebit+EF", onebit);

  ASSERT_EQ(none.eval.samples, 10000u);
  EXPECT_EQ(none.comp.compressed_messages, 0u);
  EXPECT_EQ(none.frames_decoded, 0u);
  EXPECT_GT(none.eval.auc, 0.75);
  // Every dense push of the compressed runs went out compressed and was decoded by a server.
  for (const RunResult* r : {&topk, &topk_no_ef, &onebit}) {
    EXPECT_EQ(r->comp.compressed_messages, r->comp.messages);
    EXPECT_EQ(r->frames_decoded, r->comp.compressed_messages);
    EXPECT_EQ(r->eval.samples, none.eval.samples);
  }
  // top-1%: 8 bytes per sent entry against 4 per float -> 2% of the bytes; onebit ~1/32.
  EXPECT_LT(topk.comp.bytes_encoded, topk.comp.bytes_raw / 45);
  EXPECT_LT(onebit.comp.bytes_encoded, onebit.comp.bytes_raw / 30);

  // Measured: AUC none 0.7703, top-1% + EF 0.7704, onebit + EF 0.7708 (runs are repeatable).
  EXPECT_NEAR(topk.eval.auc, none.eval.auc, 0.001);
  EXPECT_NEAR(onebit.eval.auc, none.eval.auc, 0.002);
  // Without error feedback the same top-1% is worse on both metrics. The gap is small here
  // (measured: AUC -0.0010, logloss +0.0014 against EF) because the server's Adagrad rescales
  // every coordinate it does receive; the runs are deterministic, so half of it is asserted.
  EXPECT_LT(topk_no_ef.eval.auc, topk.eval.auc - 0.0005);
  EXPECT_GT(topk_no_ef.eval.logloss, topk.eval.logloss + 0.0007);
}

TEST(CompressionConvergenceTest, ErrorFeedbackMattersMoreAsTheDensityFalls) {
  // top-0.1%: without a residual, the coordinates that never reach the top 0.1% of one step are
  // never updated at all. Measured here: AUC 0.7711 with EF (uncompressed: 0.7703) vs 0.7619
  // without, logloss 0.4548 vs 0.4632; half of each gap is asserted.
  std::vector<std::string> ef = TopK(true), no_ef = TopK(false);
  ef[1] = no_ef[1] = std::string(kCodec) + "density=0.001";
  RunResult with = Train(ef);
  Print("topk.1%+EF", with);
  RunResult without = Train(no_ef);
  Print("topk.1%", without);
  EXPECT_LT(without.eval.auc, with.eval.auc - 0.0045);
  EXPECT_GT(without.eval.logloss, with.eval.logloss + 0.004);
}

TEST(CompressionConvergenceTest, WarmupScheduleRampsTheDensityDown) {
  std::vector<std::string> sets = TopK(true);
  sets.push_back(std::string(kCodec) + "schedule.type=warmup");
  sets.push_back(std::string(kCodec) + "schedule.start_density=0.25");
  sets.push_back(std::string(kCodec) + "schedule.steps=200");
  sets.push_back("train.steps=300");
  RunResult warm = Train(sets);
  Print("warmup", warm);
  RunResult flat = Train({TopK(true)[0], TopK(true)[1], TopK(true)[2], TopK(true)[3], "train.steps=300"});
  Print("flat", flat);
  // After the ramp the density is the final 1%; during it, more was sent than at a flat 1%.
  EXPECT_NEAR(warm.comp.last_density, 0.01, 0.0005);
  EXPECT_GT(warm.comp.bytes_encoded, 2 * flat.comp.bytes_encoded);
  EXPECT_EQ(warm.comp.bytes_raw, flat.comp.bytes_raw);
  EXPECT_GT(warm.eval.auc, 0.7);
}

// Sparse embedding rows pushed as fp16 or bf16 (tables.embeddings.codec), and also pulled as bf16
// (pull_codec): every sparse push is decoded by its server from half the bytes, and the model
// trains as with fp32 rows.
TEST(CompressionConvergenceTest, Fp16AndBf16SparseRowsKeepTheAuc) {
  RunResult none = Train({});
  Print("rows fp32", none);
  RunResult fp16 = Train({"tables.embeddings.codec.type=fp16"});
  Print("rows fp16", fp16);
  RunResult bf16 = Train({"tables.embeddings.codec.type=bf16"});
  Print("rows bf16", bf16);
  RunResult both = Train({"tables.embeddings.codec.type=bf16", "tables.embeddings.pull_codec=bf16"});
  Print("bf16 2-way", both);
  EXPECT_EQ(none.frames_decoded, 0u);
  for (const RunResult* r : {&fp16, &bf16, &both}) {
    // 1000 steps, one sparse push per step to each of the 2 servers; the MLP goes uncompressed.
    EXPECT_EQ(r->frames_decoded, 2000u);
    EXPECT_EQ(r->comp.compressed_messages, 0u);
    EXPECT_EQ(r->bytes_decoded, 2 * r->bytes_encoded);
    EXPECT_EQ(r->eval.samples, none.eval.samples);
  }
  // Measured: AUC fp32 rows 0.7703, bf16 0.7698, fp16 0.7693 (runs are repeatable). fp16 loses
  // more, most likely because embedding-gradient entries (per-sample gradients averaged over the
  // batch of 256) often fall below its normal range (6.1e-5), where it keeps fewer bits; bf16
  // has fp32's exponent range.
  EXPECT_NEAR(bf16.eval.auc, none.eval.auc, 0.002);
  EXPECT_NEAR(fp16.eval.auc, none.eval.auc, 0.002);
  // Pulled rows in bf16 as well: the model computes with bf16-rounded embeddings (the servers
  // keep fp32). Measured: AUC 0.7700 (fp32 rows both ways 0.7703).
  EXPECT_NEAR(both.eval.auc, none.eval.auc, 0.002);
}

}  // namespace
}  // namespace osprey
