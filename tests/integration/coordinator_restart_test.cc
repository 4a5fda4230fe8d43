// Coordinator restart (#12 item 3) with real processes: the test starts osprey-coordinator, two
// osprey-server and two osprey-worker processes itself (as a scheduler would: same flags as
// `osprey launch`, a free loopback port for the coordinator), kills the coordinator with SIGKILL
// mid-run and starts `osprey-coordinator --recover` on the same endpoint.
//
//  - async: three kills in one run. Each time the workers go on training while the coordinator
//    is away, every node re-registers, heartbeats resume (the time from the kill to the first
//    heartbeat of every node at the new coordinator is printed, median of the three), and the job
//    completes: every worker's steps in the final report, a sane AUC, no node marked dead.
//  - bsp: one kill; the job completes the same way; a re-registration with another session id is
//    refused by the recovered coordinator with a message naming both sessions.
//  - a coordinator that never comes back: every node fails once cluster.coordinator_outage_ms has
//    passed (not before), naming the setting.
//  - a coordinator restarted without --recover refuses the re-registrations: the nodes fail at
//    once, saying so.
//  - store.type redis (a real redis-server): the restarted coordinator reads the job's metadata
//    from Redis first, and the job completes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/transport.h"
#include "coordinator/coordinator_client.h"
#include "coordinator/final_state.h"
#include "tests/testing/free_port.h"
#include "tests/testing/launch_util.h"
#include "tests/testing/test_env.h"
#ifdef OSPREY_HAVE_REDIS
#include "tests/testing/redis_fixture.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using osprey::testing::EnvOr;
using osprey::testing::ReadFile;
namespace proto = osprey::proto;

struct Child {
  std::string name;
  pid_t pid = -1;
  bool reaped = false;
  int status = 0;
};

bool ExitedWith(const Child& c, int code) {
  return c.reaped && WIFEXITED(c.status) && WEXITSTATUS(c.status) == code;
}

// The processes of one job; whatever still runs at the end is killed and reaped.
class Job {
 public:
  Job(const std::string& config, std::vector<std::string> sets, const std::string& name)
      : dir_(::testing::TempDir() + "/osprey-coordinator-restart-" + name) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    bin_ = EnvOr("OSPREY_BIN_DIR", "build/bin");
    common_ = {"--config", EnvOr("OSPREY_SOURCE_DIR", ".") + "/configs/" + config};
    endpoint_ = "tcp://127.0.0.1:" + std::to_string(osprey::testing::FreePort());
    sets.push_back("cluster.coordinator=" + endpoint_);
    for (const auto& s : sets) common_.insert(common_.end(), {"--set", s});
  }
  ~Job() {
    client_.reset();
    for (auto& c : children_) {
      if (!c.reaped && c.pid > 0) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
    }
  }

  void Start() {
    StartCoordinator(false);
    for (const char* n : {"server-0", "server-1"}) Spawn(n, "osprey-server", {});
    for (const char* n : {"worker-0", "worker-1"}) Spawn(n, "osprey-worker", {});
  }
  // A coordinator (the first, or a restarted one) on the job's endpoint.
  void StartCoordinator(bool recover) {
    std::string name = "coordinator-" + std::to_string(coordinators_++);
    std::vector<std::string> extra = {"--final-state", dir_ + "/" + name + ".state"};
    if (recover) extra.push_back("--recover");
    Spawn(name, "osprey-coordinator", extra);
  }
  std::string coordinator() const { return "coordinator-" + std::to_string(coordinators_ - 1); }
  // SIGKILL of the running coordinator; returns once it is gone.
  Clock::time_point KillCoordinator() {
    Child& c = child(coordinator());
    EXPECT_EQ(::kill(c.pid, SIGKILL), 0);
    const Clock::time_point killed = Clock::now();
    while (!Exited(c)) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return killed;
  }

  Child& child(const std::string& name) {
    for (auto& c : children_) {
      if (c.name == name) return c;
    }
    throw std::runtime_error("no child " + name);
  }
  std::vector<Child>& children() { return children_; }
  std::string log(const std::string& name) const { return dir_ + "/" + name + ".log"; }
  const std::string& endpoint() const { return endpoint_; }
  // Where the current coordinator writes its final ClusterState.
  std::string state_path() const { return dir_ + "/" + coordinator() + ".state"; }

  bool Exited(Child& c) {
    if (c.reaped) return true;
    int st = 0;
    if (::waitpid(c.pid, &st, WNOHANG) == c.pid) {
      c.reaped = true;
      c.status = st;
    }
    return c.reaped;
  }
  // Waits until every node (servers and workers) and the current coordinator exited.
  bool WaitAll(Clock::time_point deadline) {
    return WaitFor([&] {
      bool all = true;
      for (auto& c : children_) all = Exited(c) && all;
      return all;
    }, deadline);
  }
  bool WaitFor(const std::function<bool()>& pred, Clock::time_point deadline) {
    while (Clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // The coordinator's state now; nullopt while it does not answer.
  std::optional<proto::ClusterState> State() {
    if (!client_) {
      auto t = osprey::MakeTransport(osprey::TransportOptions{});
      if (!t.ok()) return std::nullopt;
      auto c = osprey::coordinator::CoordinatorClient::Create(std::move(t).value(), endpoint_);
      if (!c.ok()) return std::nullopt;
      client_ = std::move(c).value();
    }
    auto st = client_->GetState(200);  // fine-grained: the restart is timed with it
    if (!st.ok()) return std::nullopt;
    return *st;
  }
  // The smallest clock of the workers (-1 before the rendezvous or when unreachable).
  long MinWorkerClock() {
    auto s = State();
    if (!s || s->nodes_size() == 0) return -1;
    long min = -1;
    for (const auto& n : s->nodes()) {
      if (n.role() == proto::ROLE_WORKER) min = min < 0 ? n.clock() : std::min<long>(min, n.clock());
    }
    return min;
  }
  // Every node that has not reported sent this coordinator a heartbeat, and it is not
  // recovering any more.
  bool HeartbeatsResumed() {
    auto s = State();
    if (!s || s->recovering() || s->nodes_size() != 4) return false;
    for (const auto& n : s->nodes()) {
      bool reported = false;
      for (const auto& r : s->reports()) reported = reported || (n.role() == proto::ROLE_WORKER && r.rank() == n.rank());
      if (!reported && n.heartbeats() == 0) return false;
    }
    return true;
  }
  std::string Logs() {
    std::string out = "still running:";
    for (auto& c : children_) {
      if (!Exited(c)) out += " " + c.name + " (pid " + std::to_string(c.pid) + ")";
    }
    out += "\n";
    for (const auto& c : children_) out += "---- " + c.name + "\n" + ReadFile(log(c.name));
    return out;
  }

 private:
  void Spawn(const std::string& name, const std::string& binary, const std::vector<std::string>& extra) {
    std::vector<std::string> args = common_;
    args.insert(args.end(), extra.begin(), extra.end());
    std::string path = bin_ + "/" + binary;
    std::string logp = log(name);
    const pid_t pid = osprey::testing::SpawnLogged(path, args, logp);
    children_.push_back(Child{name, pid});
  }

  std::string dir_, bin_, endpoint_;
  std::vector<std::string> common_;
  std::vector<Child> children_;
  int coordinators_ = 0;
  std::unique_ptr<osprey::coordinator::CoordinatorClient> client_;
};

// One kill of the coordinator once every worker reached `clock`, and its restart with --recover.
// Returns the seconds from the kill to heartbeats resumed (every node's first heartbeat at the
// new coordinator), or a negative number when they did not within 30 s.
double KillAndRecover(Job& job, long clock, long* clock_at_kill, long* clock_at_resume) {
  if (!job.WaitFor([&] { return job.MinWorkerClock() >= clock; }, Clock::now() + std::chrono::seconds(60))) {
    ADD_FAILURE() << "the workers did not reach clock " << clock << "\n" << job.Logs();
    return -1;
  }
  *clock_at_kill = job.MinWorkerClock();
  const Clock::time_point killed = job.KillCoordinator();
  job.StartCoordinator(/*recover=*/true);
  if (!job.WaitFor([&] { return job.HeartbeatsResumed(); }, killed + std::chrono::seconds(30))) {
    ADD_FAILURE() << "heartbeats did not resume\n" << job.Logs();
    return -1;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  *clock_at_resume = job.MinWorkerClock();
  return seconds;
}

// The job completed: every process exited 0, the final state has both reports with every step,
// rank 0's AUC is sane, nobody was marked dead.
void ExpectCompleted(Job& job, int steps) {
  ASSERT_TRUE(job.WaitAll(Clock::now() + std::chrono::seconds(120))) << job.Logs();
  for (auto& c : job.children()) {
    if (c.name.rfind("coordinator-", 0) == 0 && c.name != job.coordinator()) continue;  // killed
    EXPECT_TRUE(ExitedWith(c, 0)) << c.name << "\n" << job.Logs();
  }
  auto state = osprey::coordinator::ReadFinalState(job.state_path());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_TRUE(state->done());
  EXPECT_TRUE(state->failure().empty()) << state->failure();
  ASSERT_EQ(state->reports_size(), 2) << job.Logs();
  for (const auto& r : state->reports()) {
    EXPECT_EQ(r.steps(), static_cast<uint64_t>(steps)) << "worker " << r.rank();
    if (r.rank() == 0) {
      EXPECT_GT(r.auc(), 0.6) << "held-out AUC";
      EXPECT_LE(r.auc(), 1.0);
    }
  }
  for (const auto& n : state->nodes()) EXPECT_TRUE(n.alive()) << n.role() << " " << n.rank();
  for (auto& c : job.children()) {
    EXPECT_EQ(ReadFile(job.log(c.name)).find("marked dead"), std::string::npos) << c.name;
  }
}

TEST(CoordinatorRestartTest, AsyncJobSurvivesThreeCoordinatorKills) {
  constexpr int kSteps = 3000;
  Job job("async.yaml", {"train.steps=" + std::to_string(kSteps), "train.eval_samples=4000"},
          "async");
  job.Start();
  std::vector<double> resumed;
  long at = 100;
  for (int i = 0; i < 3; ++i) {
    long at_kill = 0, at_resume = 0;
    double s = KillAndRecover(job, at, &at_kill, &at_resume);
    ASSERT_GE(s, 0) << "kill " << i;
    resumed.push_back(s);
    std::printf("kill %d at worker clock %ld: heartbeats resumed after %.3f s, workers at clock %ld\n",
                i, at_kill, s, at_resume);
    EXPECT_GT(at_resume, at_kill) << "the workers went on training while the coordinator was away";
    at = at_resume + 100;  // training goes on after the restart too
  }
  std::sort(resumed.begin(), resumed.end());
  std::printf("coordinator kill -> heartbeats resumed: median %.3f s (min %.3f, max %.3f; "
              "heartbeat_interval_ms 500)\n", resumed[1], resumed[0], resumed[2]);
  ExpectCompleted(job, kSteps);
  EXPECT_NE(ReadFile(job.log("worker-0")).find("re-registered"), std::string::npos);
}

TEST(CoordinatorRestartTest, BspJobSurvivesACoordinatorKillAndAnotherSessionIsRefused) {
  constexpr int kSteps = 1500;
  Job job("bsp.yaml", {"train.steps=" + std::to_string(kSteps), "train.eval_samples=4000"}, "bsp");
  job.Start();
  long at_kill = 0, at_resume = 0;
  double s = KillAndRecover(job, 200, &at_kill, &at_resume);
  ASSERT_GE(s, 0);
  std::printf("bsp: kill at worker clock %ld, heartbeats resumed after %.3f s at clock %ld\n",
              at_kill, s, at_resume);
  // A node of another job (another session id) is refused by the recovered coordinator.
  auto t = osprey::MakeTransport(osprey::TransportOptions{});
  ASSERT_TRUE(t.ok());
  auto rogue = osprey::coordinator::CoordinatorClient::Create(std::move(t).value(), job.endpoint());
  ASSERT_TRUE(rogue.ok());
  proto::RegisterRequest req;
  req.set_role(proto::ROLE_WORKER);
  req.set_host("elsewhere");
  req.set_pid(1);
  req.set_requested_rank(1);
  req.set_rejoin(true);
  req.set_session_id(0x1234);
  req.set_incarnation(5);
  auto reply = (*rogue)->Register(req, 5000);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), osprey::StatusCode::kFailedPrecondition) << reply.status().ToString();
  EXPECT_NE(reply.status().message().find("session 1234"), std::string::npos) << reply.status().ToString();
  ExpectCompleted(job, kSteps);
}

TEST(CoordinatorRestartTest, NodesFailAfterTheOutageBudgetWhenTheCoordinatorNeverComesBack) {
  constexpr int kOutageMs = 3000;
  Job job("async.yaml", {"train.steps=100000", "cluster.coordinator_outage_ms=" + std::to_string(kOutageMs)},
          "never");
  job.Start();
  ASSERT_TRUE(job.WaitFor([&] { return job.MinWorkerClock() >= 50; }, Clock::now() + std::chrono::seconds(60)))
      << job.Logs();
  const Clock::time_point killed = job.KillCoordinator();
  ASSERT_TRUE(job.WaitAll(killed + std::chrono::milliseconds(kOutageMs + 20000))) << job.Logs();
  const double exited_s = std::chrono::duration<double>(Clock::now() - killed).count();
  std::printf("every node exited %.2f s after the coordinator's kill (outage budget %.1f s)\n", exited_s,
              kOutageMs / 1000.0);
  EXPECT_GE(exited_s, kOutageMs / 1000.0 - 0.6) << "a node gave up before the outage budget";
  EXPECT_LT(exited_s, kOutageMs / 1000.0 + 5) << "a node kept going well past the outage budget";
  for (auto& c : job.children()) {
    if (c.name == job.coordinator()) continue;
    EXPECT_TRUE(ExitedWith(c, 1)) << c.name;
    EXPECT_NE(ReadFile(job.log(c.name)).find("cluster.coordinator_outage_ms"), std::string::npos)
        << c.name << ":\n" << ReadFile(job.log(c.name));
  }
}

TEST(CoordinatorRestartTest, CoordinatorRestartedWithoutRecoverIsRefusedClearly) {
  Job job("async.yaml", {"train.steps=100000", "cluster.startup_timeout_ms=20000"}, "norecover");
  job.Start();
  ASSERT_TRUE(job.WaitFor([&] { return job.MinWorkerClock() >= 50; }, Clock::now() + std::chrono::seconds(60)))
      << job.Logs();
  const Clock::time_point killed = job.KillCoordinator();
  job.StartCoordinator(/*recover=*/false);
  const std::string fresh = job.coordinator();
  ASSERT_TRUE(job.WaitFor([&] {
    for (auto& c : job.children()) {
      if (c.name != fresh && !job.Exited(c)) return false;
    }
    return true;
  }, killed + std::chrono::seconds(20))) << job.Logs();
  std::printf("nodes exited %.2f s after the kill\n",
              std::chrono::duration<double>(Clock::now() - killed).count());
  for (auto& c : job.children()) {
    if (c.name.rfind("coordinator-", 0) == 0) continue;
    EXPECT_TRUE(ExitedWith(c, 1)) << c.name;
    EXPECT_NE(ReadFile(job.log(c.name)).find("not started with --recover"), std::string::npos)
        << c.name << ":\n" << ReadFile(job.log(c.name));
  }
}

#ifdef OSPREY_HAVE_REDIS
TEST(CoordinatorRestartTest, RedisStoreJobRecoversFromTheMetadataInRedis) {
  auto redis = osprey::testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  constexpr int kSteps = 1500;
  Job job("local-redis.yaml",
          {"train.steps=" + std::to_string(kSteps), "train.eval_samples=4000", "store.redis.local=none",
           "store.redis.endpoints=" + (*redis)->endpoint().ToString(), "store.redis.key_prefix=restart"},
          "redis");
  job.Start();
  long at_kill = 0, at_resume = 0;
  double s = KillAndRecover(job, 200, &at_kill, &at_resume);
  ASSERT_GE(s, 0);
  std::printf("redis store: kill at worker clock %ld, heartbeats resumed after %.3f s\n", at_kill, s);
  EXPECT_NE(ReadFile(job.log(job.coordinator())).find("from the stored metadata"), std::string::npos)
      << ReadFile(job.log(job.coordinator()));
  ExpectCompleted(job, kSteps);
}
#endif

}  // namespace
