// The pieces of `osprey launch` that need no cluster: progress line, final report and its JSON,
// endpoint resolution, log tails, and ChildSet's process handling (with /bin/sh children).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "tests/coordinator/process_test_util.h"
#include "tools/child_process.h"
#include "tools/launcher.h"
#include "tools/progress.h"
#include "tools/report.h"

namespace osprey::tools {
namespace {

using Ms = std::chrono::milliseconds;
using testing::ProcessGone;
using testing::TempDir;

proto::NodeState* AddWorker(proto::ClusterState* s, int rank, int64_t clock, uint64_t samples,
                            double loss) {
  proto::NodeState* n = s->add_nodes();
  n->set_role(proto::ROLE_WORKER);
  n->set_rank(rank);
  n->set_alive(true);
  n->set_clock(clock);
  n->set_samples(samples);
  n->set_loss(loss);
  return n;
}

TEST(ProgressMeterTest, ShowsSlowestWorkerRateAndLoss) {
  ProgressMeter meter(500);
  const auto t0 = std::chrono::steady_clock::now();
  proto::ClusterState s;
  s.set_epoch(1);
  s.set_num_workers(2);
  AddWorker(&s, 0, 100, 10000, 0.5);
  AddWorker(&s, 1, 120, 10000, 0.4);
  EXPECT_TRUE(meter.Update(s, t0));
  s.mutable_nodes(0)->set_clock(125);
  s.mutable_nodes(0)->set_samples(20000);
  s.mutable_nodes(1)->set_samples(20000);
  EXPECT_TRUE(meter.Update(s, t0 + Ms(1000)));
  EXPECT_FALSE(meter.Update(s, t0 + Ms(1500))) << "nothing moved";
  EXPECT_EQ(meter.step(), 120);
  EXPECT_EQ(meter.Line(), "[####................] step 120/500  13.3k samples/s  loss 0.4500");
}

// The loss curve: one point per poll where the slowest worker's step advanced, none for polls
// where it did not, and it reaches the report's JSON.
TEST(ProgressMeterTest, RecordsTheLossCurveWhenTheStepAdvances) {
  ProgressMeter meter(500);
  const auto t0 = std::chrono::steady_clock::now();
  proto::ClusterState s;
  s.set_epoch(1);
  s.set_num_workers(2);
  AddWorker(&s, 0, 100, 10000, 0.5);
  AddWorker(&s, 1, 120, 10000, 0.3);
  meter.Update(s, t0);
  meter.Update(s, t0 + Ms(500));  // the step did not advance: no point
  s.mutable_nodes(0)->set_clock(200);
  s.mutable_nodes(0)->set_samples(30000);
  s.mutable_nodes(1)->set_clock(210);
  s.mutable_nodes(1)->set_samples(30000);
  s.mutable_nodes(1)->set_loss(0.2);
  meter.Update(s, t0 + Ms(1000));
  ASSERT_EQ(meter.curve().size(), 2u);
  EXPECT_EQ(meter.curve()[0].step, 100);
  EXPECT_DOUBLE_EQ(meter.curve()[0].loss, 0.4);
  EXPECT_DOUBLE_EQ(meter.curve()[0].seconds, 0);
  EXPECT_EQ(meter.curve()[1].step, 200);
  EXPECT_DOUBLE_EQ(meter.curve()[1].loss, 0.35);
  EXPECT_DOUBLE_EQ(meter.curve()[1].seconds, 1.0);
  EXPECT_NEAR(meter.curve()[1].samples_per_sec, 40000, 1);

  JobReport r;
  r.curve = meter.curve();
  const std::string json = ReportJson(r);
  EXPECT_NE(json.find("\"curve\": [{\"seconds\": 0, \"step\": 100, \"loss\": 0.4, "
                      "\"samples_per_sec\": 0}, {\"seconds\": 1, \"step\": 200, "),
            std::string::npos) << json;
}

TEST(ProgressMeterTest, BeforeTheRendezvousShowsWhoRegistered) {
  ProgressMeter meter(10);
  proto::ClusterState s;
  s.set_num_servers(2);
  s.set_num_workers(2);
  s.add_nodes()->set_role(proto::ROLE_SERVER);
  meter.Update(s, std::chrono::steady_clock::now());
  EXPECT_EQ(meter.Line(), "waiting for nodes: 1/2 servers, 0/2 workers");
}

TEST(ReportTest, SummarizesWorkerReports) {
  proto::ClusterState s;
  proto::WorkerReport* w1 = s.add_reports();
  w1->set_rank(1);
  w1->set_steps(90);
  w1->set_samples(3000);
  w1->set_train_seconds(2.0);
  w1->set_bytes_pushed(100);
  w1->set_bytes_pulled(1000);
  proto::WorkerReport* w0 = s.add_reports();
  w0->set_rank(0);
  w0->set_steps(100);
  w0->set_samples(1000);
  w0->set_train_seconds(4.0);
  w0->set_bytes_pushed(10);
  w0->set_bytes_pulled(20);
  w0->set_auc(0.75);
  w0->set_oracle_auc(0.8);
  w0->set_logloss(0.45);
  w0->set_time_compute(3.0);
  w1->set_time_compute(1.0);
  w0->set_time_wait_input(1.0);
  w0->set_cache_lookups(100);
  w0->set_cache_hits(90);
  w1->set_cache_lookups(100);
  w1->set_cache_hits(70);
  w0->set_device("cuda:0 (H200)");
  JobReport r = SummarizeReports(s, 7.5);
  EXPECT_DOUBLE_EQ(r.time_compute, 2.0);  // averaged over the 2 workers
  EXPECT_DOUBLE_EQ(r.time_wait_input, 0.5);
  EXPECT_DOUBLE_EQ(r.cache_hit_rate, 0.8);
  EXPECT_DOUBLE_EQ(r.bytes_per_sample, 1130.0 / 4000);
  EXPECT_EQ(r.device, "cuda:0 (H200)");
  EXPECT_EQ(r.steps, 100u);
  EXPECT_DOUBLE_EQ(r.samples_per_sec, 1000.0);  // 4000 samples / the longest 4 s
  EXPECT_EQ(r.bytes_pushed, 110u);
  EXPECT_EQ(r.bytes_pulled, 1020u);
  EXPECT_DOUBLE_EQ(r.auc, 0.75);
  const std::string json = ReportJson(r);
  EXPECT_EQ(json.rfind("{\"auc\": 0.75, \"oracle_auc\": 0.8, \"logloss\": 0.45, "
                       "\"samples_per_sec\": 1000, \"steps\": 100, \"bytes_pushed\": 110, "
                       "\"bytes_pulled\": 1020, \"wall_seconds\": 7.5, \"time_wait_input\": 0.5, "
                       "\"time_compute\": 2, ", 0), 0u) << json;
  EXPECT_NE(json.find("\"cache_hit_rate\": 0.8, "), std::string::npos) << json;
  EXPECT_NE(json.find("\"device\": \"cuda:0 (H200)\", \"curve\": []}\n"), std::string::npos) << json;
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("held-out AUC      0.7500"), std::string::npos);
  EXPECT_NE(text.find("wait-input 20%, compute 80%, push 0%"), std::string::npos) << text;
  EXPECT_NE(text.find("hit rate 80.0%"), std::string::npos) << text;
}

TEST(ReportTest, SummarizesServerReportsAndDensityTrajectory) {
  proto::ClusterState s;
  proto::WorkerReport* w0 = s.add_reports();
  w0->set_rank(0);
  w0->set_compressed_messages(100);
  w0->set_dense_push_bytes_raw(400000);
  w0->set_dense_push_bytes_encoded(8000);
  w0->set_last_density(0.01);
  for (auto [step, density] : {std::pair<uint64_t, double>{0, 0.25}, {50, 0.05}, {99, 0.01}}) {
    proto::DensityPoint* p = w0->add_density_trajectory();
    p->set_step(step);
    p->set_density(density);
  }
  proto::WorkerReport* w1 = s.add_reports();
  w1->set_rank(1);
  w1->add_density_trajectory()->set_density(0.5);  // only worker 0's trajectory is reported
  for (int rank : {0, 1}) {
    proto::ServerReport* sr = s.add_server_reports();
    sr->set_rank(rank);
    proto::ServerStats* st = sr->mutable_stats();
    st->set_windows_applied(100 + rank);
    st->set_pushes_applied(200);
    st->set_pushes_dropped(rank);
    st->set_pulls_held(3);
    st->set_rows_dropped(5 * rank);
    for (uint64_t c : {90u, 6u, 3u, 1u}) st->add_staleness_histogram(rank == 0 ? c : 2 * c);
    if (rank == 1) st->add_staleness_histogram(0);  // a longer histogram merges bucket by bucket
    sr->set_decoded_pushes(rank == 0 ? 100 : 0);
    sr->set_decode_bytes_encoded(rank == 0 ? 8000 : 0);
    sr->set_decode_bytes_decoded(rank == 0 ? 400000 : 0);
    sr->set_decode_seconds(rank == 0 ? 0.0125 : 0);
  }
  JobReport r = SummarizeReports(s, 3.0);
  EXPECT_EQ(r.num_server_reports, 2);
  EXPECT_EQ(r.windows_applied, 201u);
  EXPECT_EQ(r.pushes_applied, 400u);
  EXPECT_EQ(r.pushes_dropped, 1u);
  EXPECT_EQ(r.pulls_held, 6u);
  EXPECT_EQ(r.rows_dropped, 5u);
  EXPECT_EQ(r.decoded_pushes, 100u);
  EXPECT_DOUBLE_EQ(r.decode_seconds, 0.0125);
  EXPECT_EQ(r.staleness, (std::vector<uint64_t>{270, 18, 9, 3, 0}));
  ASSERT_EQ(r.density_trajectory.size(), 3u);
  EXPECT_EQ(r.density_trajectory[1].first, 50u);
  EXPECT_DOUBLE_EQ(r.density_trajectory[1].second, 0.05);

  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("last density 0.0100, density by step {0: 0.25, 50: 0.05, 99: 0.01}\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("  servers           2 reported: 201 optimizer steps, 400 pushes applied, 1 "
                      "dropped, 6 pulls held, 5 rows dropped, 0 rows skipped; decoded 100 compressed "
                      "pushes (7.81 KiB -> 390.62 KiB) in 12.5 ms\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("  staleness         0: 270 (90.0%), [1,2): 18 (6.0%), [2,4): 9 (3.0%), "
                      "[4,8): 3 (1.0%)\n"),
            std::string::npos) << text;

  const std::string json = ReportJson(r);
  EXPECT_NE(json.find("\"server_reports\": 2, \"server_windows_applied\": 201, "
                      "\"server_pushes_applied\": 400, \"server_pushes_dropped\": 1, "
                      "\"server_rows_dropped\": 5, \"server_rows_skipped\": 0, "
                      "\"server_pulls_held\": 6, \"server_decoded_pushes\": 100, "
                      "\"server_decode_bytes_encoded\": 8000, \"server_decode_bytes_decoded\": 400000, "
                      "\"server_decode_seconds\": 0.0125, \"server_refused\": 0, "
                      "\"server_auth_refused\": 0, \"server_limit_refusals\": 0, "
                      "\"server_bad_headers\": 0, \"coordinator_refused\": 0, "
                      "\"coordinator_bad_requests\": 0, \"staleness_histogram\": [270, 18, 9, 3, 0], "
                      "\"density_trajectory\": [{\"step\": 0, \"density\": 0.25}, "
                      "{\"step\": 50, \"density\": 0.05}, {\"step\": 99, \"density\": 0.01}], "
                      "\"adaptive_ratio\": [], \"device\": \"\", \"curve\": []}\n"),
            std::string::npos) << json;
}

// The adaptive per-node ratio's entries: one per worker that ran it, by rank, in text and JSON.
TEST(ReportTest, AdaptiveRatioWorkersAreReportedByRank) {
  proto::ClusterState s;
  for (int rank : {1, 0}) {
    proto::WorkerReport* w = s.add_reports();
    w->set_rank(rank);
    w->set_samples(1000);
    w->set_train_seconds(2.0);
    w->set_adaptive_ratio(true);
    w->set_adaptive_final_density(rank == 1 ? 0.01 : 0.2);
    w->set_adaptive_min_density(rank == 1 ? 0.01 : 0.2);
    w->set_adaptive_max_density(0.2);
    w->set_adaptive_changes(rank == 1 ? 5 : 0);
    w->set_adaptive_step_seconds(rank == 1 ? 0.0111 : 0.0063);
    w->set_adaptive_median_step_seconds(0.0087);
    if (rank == 1) {  // async_barrier: worker 1 left the step barrier
      w->set_adaptive_barrier_exits(1);
      w->set_adaptive_steps_outside_barrier(170);
      w->set_adaptive_clocks_skipped(420);
    }
  }
  s.add_reports()->set_rank(2);  // no adaptive_ratio: not listed
  JobReport r = SummarizeReports(s, 1.0);
  ASSERT_EQ(r.adaptive.size(), 2u);
  EXPECT_EQ(r.adaptive[0].rank, 0);
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("500 samples/s\n"), std::string::npos) << "worker 0 never left the barrier: no barrier part";
  EXPECT_NE(text.find("adaptive ratio    worker 1: density 0.01 (range 0.01-0.2, 5 changes), step 11.1 ms vs "
                      "median 8.7 ms, 500 samples/s, left the barrier 1x: 170 steps outside it, 420 clocks "
                      "skipped\n"),
            std::string::npos)
      << text;
  const std::string json = ReportJson(r);
  EXPECT_NE(json.find("\"adaptive_ratio\": [{\"rank\": 0, \"final_density\": 0.2, \"min_density\": 0.2, "
                      "\"max_density\": 0.2, \"changes\": 0, \"cheap_select\": false, \"step_seconds\": 0.0063, "
                      "\"median_step_seconds\": 0.0087, \"samples_per_sec\": 500, \"barrier_exits\": 0, "
                      "\"steps_outside_barrier\": 0, \"clocks_skipped\": 0}, {\"rank\": 1, "),
            std::string::npos)
      << json;
}

TEST(ReportTest, RedisUnflushedRowsAreSummedAndReported) {
  proto::ClusterState s;
  for (int rank : {0, 1}) s.add_server_reports()->mutable_stats()->set_redis_unflushed_rows(5 + rank);
  JobReport r = SummarizeReports(s, 1.0);
  EXPECT_EQ(r.redis_unflushed_rows, 11u);
  EXPECT_NE(FormatReport(r).find("redis store       11 rows not yet flushed"), std::string::npos)
      << FormatReport(r);
  EXPECT_NE(ReportJson(r).find("\"server_redis_unflushed_rows\": 11"), std::string::npos);
  // None unflushed: no line.
  EXPECT_EQ(FormatReport(SummarizeReports(proto::ClusterState(), 1.0)).find("redis store"),
            std::string::npos);
}

TEST(ReportTest, RefusalsOfServersAndCoordinatorAreReported) {
  proto::ClusterState s;
  s.add_reports()->set_rank(0);
  for (int rank : {0, 1}) {
    proto::ServerStats* st = s.add_server_reports()->mutable_stats();
    st->set_refused(1 + rank);
    st->set_auth_refused(rank);
    st->set_limit_refusals(3);
    st->set_bad_headers(2 * rank);
  }
  s.set_coordinator_refused(4);
  s.set_coordinator_bad_requests(6);
  JobReport r = SummarizeReports(s, 1.0);
  EXPECT_EQ(r.refused, 3u);
  EXPECT_EQ(r.limit_refusals, 6u);
  EXPECT_EQ(r.bad_headers, 2u);
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find(", 3 requests refused, 1 connections refused, 6 over a limit, 2 malformed"),
            std::string::npos) << text;
  EXPECT_NE(text.find("  coordinator       4 requests refused for their sender's role, 6 bad "
                      "messages\n"),
            std::string::npos) << text;
  const std::string json = ReportJson(r);
  EXPECT_NE(json.find("\"server_limit_refusals\": 6, \"server_bad_headers\": 2, "
                      "\"coordinator_refused\": 4, \"coordinator_bad_requests\": 6"),
            std::string::npos) << json;
  // A job nobody disturbed has no coordinator line.
  EXPECT_EQ(FormatReport(SummarizeReports(proto::ClusterState(), 1.0)).find("coordinator"),
            std::string::npos);
}

TEST(ReportTest, NoServerReportsNoServerLines) {
  proto::ClusterState s;
  s.add_reports()->set_rank(0);
  proto::ServerReport* sr = s.add_server_reports();  // a server that saw no push
  sr->mutable_stats()->add_staleness_histogram(0);
  JobReport r = SummarizeReports(s, 1.0);
  std::string text = FormatReport(r);
  EXPECT_NE(text.find("  servers           1 reported: 0 optimizer steps"), std::string::npos) << text;
  EXPECT_EQ(text.find("decoded"), std::string::npos) << "nothing was compressed: " << text;
  EXPECT_EQ(text.find("staleness"), std::string::npos) << "an empty histogram: " << text;
  r = SummarizeReports(proto::ClusterState(), 1.0);
  text = FormatReport(r);
  EXPECT_EQ(text.find("servers"), std::string::npos) << text;
  EXPECT_NE(ReportJson(r).find("\"server_reports\": 0, "), std::string::npos);
  EXPECT_NE(ReportJson(r).find("\"staleness_histogram\": [], \"density_trajectory\": []"),
            std::string::npos) << ReportJson(r);
}

TEST(ReportTest, MissingEvaluationIsNullInJson) {
  JobReport r = SummarizeReports(proto::ClusterState(), 1.0);
  EXPECT_TRUE(std::isnan(r.auc));
  EXPECT_NE(ReportJson(r).find("\"auc\": null"), std::string::npos);
}

TEST(TailOfFileTest, ReturnsTheLastLines) {
  TempDir tmp;
  const std::string path = tmp.path() + "/log";
  std::ofstream(path) << "one\ntwo\nthree\nfour\n";
  EXPECT_EQ(TailOfFile(path, 2), "three\nfour");
  EXPECT_EQ(TailOfFile(path, 10), "one\ntwo\nthree\nfour");
  EXPECT_EQ(TailOfFile(path + ".missing", 2), "");
}

TEST(ChildSetTest, ReportsExitCodesAndLogsOutput) {
  TempDir tmp;
  const std::string& dir = tmp.path();
  ChildSet set;
  auto a = set.Spawn({"a", "/bin/sh", {"-c", "echo hello from a; exit 3"}, dir + "/a.log", {}});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  for (int i = 0; i < 200 && set.running() > 0; ++i) {
    set.ReapExited();
    std::this_thread::sleep_for(Ms(10));
  }
  ASSERT_FALSE(set.running(*a));
  EXPECT_EQ(set.exit_info(*a).ToString(), "exited with status 3");
  EXPECT_EQ(TailOfFile(dir + "/a.log", 5), "hello from a");
  auto missing = set.Spawn({"b", dir + "/no-such-binary", {}, dir + "/b.log", {}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("No such file"), std::string::npos)
      << missing.status().message();
}

TEST(ChildSetTest, StopAllKillsChildrenAndTheirChildren) {
  TempDir tmp;
  const std::string& dir = tmp.path();
  ChildSet set;
  // A child that ignores SIGTERM and has a child of its own.
  auto a = set.Spawn({"stubborn", "/bin/sh",
                      {"-c", "trap '' TERM; sleep 300 & echo $! > " + dir + "/grandchild; wait"},
                      dir + "/a.log", {}});
  ASSERT_TRUE(a.ok());
  pid_t grandchild = 0;
  for (int i = 0; i < 300 && grandchild == 0; ++i) {
    std::ifstream(dir + "/grandchild") >> grandchild;
    std::this_thread::sleep_for(Ms(10));
  }
  ASSERT_GT(grandchild, 0);
  const auto start = std::chrono::steady_clock::now();
  set.StopAll(Ms(300));
  EXPECT_LT(std::chrono::steady_clock::now() - start, Ms(3000));
  EXPECT_EQ(set.running(), 0u);
  EXPECT_EQ(set.exit_info(*a).signal, SIGKILL);
  const pid_t child = set.pid(*a);
  EXPECT_TRUE(ProcessGone(child));
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = ProcessGone(grandchild);
    std::this_thread::sleep_for(Ms(10));
  }
  EXPECT_TRUE(gone) << "grandchild " << grandchild << " survived";
}

}  // namespace
}  // namespace osprey::tools
