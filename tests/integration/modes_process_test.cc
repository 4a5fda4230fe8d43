// Consistency modes with real processes (issue 3): the test starts osprey-coordinator, two
// osprey-server and two osprey-worker processes itself (as `osprey launch` does: same flags, a
// free loopback port for the coordinator) so that it can stop or kill one worker.
//
//  - ssp: worker 1 is frozen with SIGSTOP (a worker that makes no progress; heartbeat_timeout_ms
//    is raised so the coordinator does not mark it dead meanwhile). Worker 0 must stop within
//    staleness_bound steps (+ the steps whose pulls were already answered) of worker 1's last step
//    and stay there; after SIGCONT both finish.
//  - bsp: worker 1 is killed with SIGKILL mid-training. The coordinator marks it dead after
//    heartbeat_timeout_ms, the servers drop it from the bsp count, worker 0 trains to the end and
//    every remaining process exits 0.
// Not through `osprey launch`: the launcher fails the whole job as soon as any child exits
// non-zero (tools/launcher.cc Monitor), which a SIGKILLed worker does.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/transport.h"
#include "coordinator/coordinator_client.h"
#include "proto/wire.h"
#include "tests/testing/free_port.h"
#include "tests/testing/test_env.h"
#include "tests/testing/launch_util.h"

namespace {

using Clock = std::chrono::steady_clock;

using osprey::testing::EnvOr;
using osprey::testing::ReadFile;

using osprey::testing::FreePort;

// The rank the coordinator gave the worker writing `log` ("worker R of N: ..."); -1 until known.
// Steps a worker says it trained ("worker R trained N steps"); -1 when it did not say.
long TrainedSteps(const std::string& log) {
  static const std::regex re(R"(worker \d+ trained (\d+) steps)");
  std::string text = ReadFile(log);
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stol(m[1]);
}

int RankOf(const std::string& log) {
  static const std::regex re(R"(worker (\d+) of \d+:)");
  std::string text = ReadFile(log);
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stoi(m[1]);
}

struct Child {
  std::string name;
  pid_t pid = -1;
  bool reaped = false;
  int status = 0;
};

// Processes this test started; whatever is still running at the end is killed and reaped.
class Cluster {
 public:
  Cluster(const std::string& config, std::vector<std::string> sets, const std::string& dir)
      : dir_(dir) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    bin_ = EnvOr("OSPREY_BIN_DIR", "build/bin");
    common_ = {"--config", EnvOr("OSPREY_SOURCE_DIR", ".") + "/configs/" + config};
    endpoint_ = "tcp://127.0.0.1:" + std::to_string(FreePort());
    sets.push_back("cluster.coordinator=" + endpoint_);
    for (const auto& s : sets) common_.insert(common_.end(), {"--set", s});
  }
  ~Cluster() {
    coord_.reset();
    for (auto& c : children_) {
      if (!c.reaped && c.pid > 0) {
        ::kill(c.pid, SIGCONT);
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
    }
  }

  void Start() {
    Spawn("coordinator-0", "osprey-coordinator");
    Spawn("server-0", "osprey-server");
    Spawn("server-1", "osprey-server");
    Spawn("worker-0", "osprey-worker");
    Spawn("worker-1", "osprey-worker");
  }
  Child& child(const std::string& name) {
    for (auto& c : children_) {
      if (c.name == name) return c;
    }
    throw std::runtime_error("no child " + name);
  }
  std::string log(const std::string& name) const { return dir_ + "/" + name + ".log"; }

  // Reaps whatever exited; true once `c` has.
  bool Exited(Child& c) {
    if (c.reaped) return true;
    int st = 0;
    if (::waitpid(c.pid, &st, WNOHANG) == c.pid) {
      c.reaped = true;
      c.status = st;
    }
    return c.reaped;
  }
  // Waits until every child except `except` has exited, or `deadline`.
  bool WaitAll(Clock::time_point deadline, const std::string& except = "") {
    while (Clock::now() < deadline) {
      bool all = true;
      for (auto& c : children_) {
        if (c.name != except && !Exited(c)) all = false;
      }
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Polls `pred` every 20 ms until true or `deadline`; fails early when a child other than
  // `except` exited.
  bool WaitFor(const std::function<bool()>& pred, Clock::time_point deadline,
               const std::string& except = "") {
    while (Clock::now() < deadline) {
      if (pred()) return true;
      for (auto& c : children_) {
        if (c.name != except && Exited(c)) return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  std::vector<Child>& children() { return children_; }
  // Whether the worker process `name` reached step `step` within `seconds` (see Step).
  bool WaitForStep(const std::string& name, long step, int seconds) {
    return WaitFor([&] { return Step(name) >= step; }, Clock::now() + std::chrono::seconds(seconds));
  }

  // The step (heartbeat clock) the coordinator last heard from the worker process `name`; -1 when
  // not known yet. Heartbeats come every cluster.heartbeat_interval_ms.
  long Step(const std::string& name) {
    osprey::proto::NodeState n;
    return Node(name, &n) ? n.clock() : -1;
  }
  // How many heartbeats the coordinator has received from the worker process `name`; -1 when not
  // known yet.
  long Heartbeats(const std::string& name) {
    osprey::proto::NodeState n;
    return Node(name, &n) ? static_cast<long>(n.heartbeats()) : -1;
  }
  // Whether, within `seconds`, the worker process `name` reported the same step in `heartbeats`
  // consecutive heartbeats after the first that carried it: it has stopped making steps while
  // alive (a pull held at the servers blocks training, not the heartbeat thread).
  bool WaitForStill(const std::string& name, long heartbeats, int seconds) {
    long step = -2, since = 0;
    return WaitFor(
        [&] {
          osprey::proto::NodeState n;
          if (!Node(name, &n)) return false;
          if (n.clock() != step) {
            step = n.clock();
            since = static_cast<long>(n.heartbeats());
            return false;
          }
          return static_cast<long>(n.heartbeats()) - since >= heartbeats;
        },
        Clock::now() + std::chrono::seconds(seconds));
  }
  // Whether the coordinator received `more` heartbeats from the worker process `name` (after the
  // ones counted now) within `seconds`.
  bool WaitForHeartbeats(const std::string& name, long more, int seconds) {
    const long start = Heartbeats(name);
    if (start < 0) return false;
    return WaitFor([&] { return Heartbeats(name) >= start + more; },
                   Clock::now() + std::chrono::seconds(seconds));
  }
  // The coordinator's record of the worker process `name`; false when not known yet.
  bool Node(const std::string& name, osprey::proto::NodeState* out) {
    int rank = RankOf(log(name));
    if (rank < 0) return false;
    if (!coord_) {
      auto t = osprey::MakeTransport(osprey::TransportOptions{});
      if (!t.ok()) return false;
      auto c = osprey::coordinator::CoordinatorClient::Create(std::move(t).value(), endpoint_);
      if (!c.ok()) return false;
      coord_ = std::move(c).value();
    }
    auto st = coord_->GetState(1000);
    if (!st.ok()) return false;
    for (const auto& n : st->nodes()) {
      if (n.role() == osprey::proto::ROLE_WORKER && n.rank() == rank) {
        *out = n;
        return true;
      }
    }
    return false;
  }
  std::string Logs() const {
    std::string out;
    for (const auto& c : children_) out += "---- " + c.name + "\n" + ReadFile(log(c.name));
    return out;
  }

 private:
  void Spawn(const std::string& name, const std::string& binary) {
    std::vector<std::string> args = common_;
    std::string path = bin_ + "/" + binary;
    std::string logp = log(name);
    const pid_t pid = osprey::testing::SpawnLogged(path, args, logp);
    children_.push_back(Child{name, pid});
  }

  std::string dir_, bin_, endpoint_;
  std::unique_ptr<osprey::coordinator::CoordinatorClient> coord_;
  std::vector<std::string> common_;
  std::vector<Child> children_;
};

bool ExitedZero(const Child& c) {
  return c.reaped && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
}

std::string Describe(const Child& c) {
  if (!c.reaped) return c.name + " still running";
  if (WIFEXITED(c.status)) return c.name + " exited " + std::to_string(WEXITSTATUS(c.status));
  if (WIFSIGNALED(c.status))
    return c.name + " killed by signal " + std::to_string(WTERMSIG(c.status));
  return c.name + " ?";
}

constexpr int kSteps = 400;
// The coordinator's clock of a worker is its step at its last heartbeat (every 20 ms here); a
// worker frozen or killed just before a heartbeat may have made up to this many more steps
// (about 200 steps/s on 2 cores).
constexpr long kHeartbeatLagSteps = 8;
// A worker that reports one step in this many consecutive heartbeats (20 ms apart; it makes about
// 4 steps per heartbeat while it trains) has stopped.
constexpr long kStillHeartbeats = 10;
// How long the test then watches a blocked worker stand still: 1.5 s of heartbeats at 20 ms.
constexpr long kWatchHeartbeats = 75;

TEST(ModesProcessTest, SspFastWorkerBlocksStalenessBoundAheadAndResumes) {
  constexpr int kBound = 2;
  Cluster cluster("ssp.yaml",
                  {"train.steps=" + std::to_string(kSteps), "cluster.heartbeat_interval_ms=20",
                   "train.eval_samples=2000",
                   "tables.embeddings.consistency.staleness_bound=" + std::to_string(kBound),
                   "tables.mlp.consistency.staleness_bound=" + std::to_string(kBound),
                   // SIGSTOP freezes the heartbeats too: keep the frozen worker alive.
                   "cluster.heartbeat_timeout_ms=30000"},
                  ::testing::TempDir() + "/osprey-modes-ssp-block");
  cluster.Start();
  ASSERT_TRUE(cluster.WaitForStep("worker-1", 20, 30))
      << "worker 1 made no progress\n"
      << cluster.Logs();
  Child& slow = cluster.child("worker-1");
  ASSERT_EQ(::kill(slow.pid, SIGSTOP), 0);
  // Let worker 0 run into the bound (it stops making steps), then watch it stand still while it
  // sends kWatchHeartbeats more heartbeats.
  ASSERT_TRUE(cluster.WaitForStill("worker-0", kStillHeartbeats, 30))
      << "worker 0 never stopped while worker 1 was frozen\n"
      << cluster.Logs();
  long w1_step = cluster.Step("worker-1");  // at its last heartbeat
  long w0_blocked = cluster.Step("worker-0");
  ASSERT_TRUE(cluster.WaitForHeartbeats("worker-0", kWatchHeartbeats, 30))
      << "worker 0 stopped heartbeating\n"
      << cluster.Logs();
  long w0_later = cluster.Step("worker-0");
  std::printf(
      "worker 1 frozen at step %ld (last heartbeat); worker 0 at %ld, %ld heartbeats later %ld "
      "(bound %d)\n",
      w1_step, w0_blocked, kWatchHeartbeats, w0_later, kBound);
  EXPECT_EQ(w0_later, w0_blocked) << "worker 0 kept training while worker 1 was frozen";
  // Worker 0's pull for step c waits while c > progress(worker 1) + bound, so worker 0 finishes at
  // most step progress + bound + 1; progress of worker 1 at the servers is at most its
  // heartbeat step + 1 (pushed, step not counted yet) + the heartbeat lag.
  EXPECT_LE(w0_later, w1_step + kHeartbeatLagSteps + 1 + kBound + 1);
  EXPECT_GE(w0_later, w1_step) << "worker 0 should have caught up to the frozen worker";
  EXPECT_LT(w0_later, kSteps);
  ASSERT_EQ(::kill(slow.pid, SIGCONT), 0);
  EXPECT_TRUE(cluster.WaitAll(Clock::now() + std::chrono::seconds(40))) << cluster.Logs();
  for (auto& c : cluster.children()) EXPECT_TRUE(ExitedZero(c)) << Describe(c);
  EXPECT_EQ(TrainedSteps(cluster.log("worker-0")), kSteps);
  EXPECT_EQ(TrainedSteps(cluster.log("worker-1")), kSteps);
}

TEST(ModesProcessTest, BspKilledWorkerIsEvictedAndTrainingFinishes) {
  constexpr int kHeartbeatTimeoutMs = 3000;
  Cluster cluster("bsp.yaml",
                  {"train.steps=" + std::to_string(kSteps), "cluster.heartbeat_interval_ms=20",
                   "train.eval_samples=2000",
                   "cluster.heartbeat_timeout_ms=" + std::to_string(kHeartbeatTimeoutMs)},
                  ::testing::TempDir() + "/osprey-modes-bsp-kill");
  cluster.Start();
  ASSERT_TRUE(cluster.WaitForStep("worker-1", 20, 30))
      << "worker 1 made no progress\n"
      << cluster.Logs();
  Child& victim = cluster.child("worker-1");
  ASSERT_EQ(::kill(victim.pid, SIGKILL), 0);
  auto killed = Clock::now();
  while (!cluster.Exited(victim)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  long w1_step = cluster.Step("worker-1");
  // bsp: worker 0 cannot get more than a step ahead of the dead worker until it is evicted.
  std::this_thread::sleep_for(std::chrono::milliseconds(kHeartbeatTimeoutMs / 2));
  long w0_held = cluster.Step("worker-0");
  EXPECT_LE(w0_held, w1_step + kHeartbeatLagSteps + 2)
      << "worker 0 ran ahead of a (dead, not yet evicted) bsp peer";
  // Evicted within the heartbeat timeout (+ a heartbeat interval and polling margin): worker 0
  // moves again.
  bool resumed =
      cluster.WaitFor([&] { return cluster.Step("worker-0") > w0_held + 5; },
                      killed + std::chrono::milliseconds(kHeartbeatTimeoutMs + 3000), "worker-1");
  double resumed_s = std::chrono::duration<double>(Clock::now() - killed).count();
  std::printf(
      "worker 1 killed at step %ld (last heartbeat); worker 0 held at %ld; resumed %.2f s "
      "after the kill (heartbeat timeout %.1f s)\n",
      w1_step, w0_held, resumed_s, kHeartbeatTimeoutMs / 1000.0);
  EXPECT_TRUE(resumed) << "worker 0 did not resume within the heartbeat timeout + 3 s\n"
                       << cluster.Logs();
  EXPECT_TRUE(cluster.WaitAll(Clock::now() + std::chrono::seconds(40), "worker-1"))
      << cluster.Logs();
  EXPECT_TRUE(victim.reaped && WIFSIGNALED(victim.status) && WTERMSIG(victim.status) == SIGKILL);
  for (auto& c : cluster.children()) {
    if (c.name != "worker-1") {
      EXPECT_TRUE(ExitedZero(c)) << Describe(c) << "\n" << cluster.Logs();
    }
  }
  EXPECT_EQ(TrainedSteps(cluster.log("worker-0")), kSteps);
  EXPECT_NE(ReadFile(cluster.log("coordinator-0")).find("marked dead"), std::string::npos)
      << ReadFile(cluster.log("coordinator-0"));
}

}  // namespace
