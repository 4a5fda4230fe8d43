// The pieces of `osprey launch` that need no cluster: progress line, final report and its JSON,
// endpoint resolution, log tails, and ChildSet's process handling (with /bin/sh children).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

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
  EXPECT_NE(json.find("\"device\": \"cuda:0 (H200)\"}\n"), std::string::npos) << json;
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("held-out AUC      0.7500"), std::string::npos);
  EXPECT_NE(text.find("wait-input 20%, compute 80%, push 0%"), std::string::npos) << text;
  EXPECT_NE(text.find("hit rate 80.0%"), std::string::npos) << text;
}

TEST(ReportTest, MissingEvaluationIsNullInJson) {
  JobReport r = SummarizeReports(proto::ClusterState(), 1.0);
  EXPECT_TRUE(std::isnan(r.auc));
  EXPECT_NE(ReportJson(r).find("\"auc\": null"), std::string::npos);
}

TEST(LauncherEndpointTest, PortZeroBecomesAFreeLoopbackPort) {
  StatusOr<std::string> ep = ResolveCoordinatorEndpoint("tcp://127.0.0.1:0");
  ASSERT_TRUE(ep.ok());
  ASSERT_EQ(ep->rfind("tcp://127.0.0.1:", 0), 0u);
  EXPECT_GT(std::stoi(ep->substr(16)), 0);
  EXPECT_EQ(*ResolveCoordinatorEndpoint("tcp://127.0.0.1:7000"), "tcp://127.0.0.1:7000");
  EXPECT_EQ(*ResolveCoordinatorEndpoint("ipc:///tmp/x.sock"), "ipc:///tmp/x.sock");
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
  auto a = set.Spawn({"a", "/bin/sh", {"-c", "echo hello from a; exit 3"}, dir + "/a.log"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  for (int i = 0; i < 200 && set.running() > 0; ++i) {
    set.ReapExited();
    std::this_thread::sleep_for(Ms(10));
  }
  ASSERT_FALSE(set.running(*a));
  EXPECT_EQ(set.exit_info(*a).ToString(), "exited with status 3");
  EXPECT_EQ(TailOfFile(dir + "/a.log", 5), "hello from a");
  auto missing = set.Spawn({"b", dir + "/no-such-binary", {}, dir + "/b.log"});
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
                      dir + "/a.log"});
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
