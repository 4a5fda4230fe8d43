// ProcessJob: one job's processes started by hand, as a scheduler starts them (osprey-coordinator,
// osprey-server --rank R, osprey-worker --rank R), each with its output in DIR/NAME.log; a
// coordinator client to read the job's state; whatever still runs at the end is killed and
// reaped. Used by the server failover test and bench/failover.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/transport.h"
#include "coordinator/coordinator_client.h"
#include "tests/testing/free_port.h"
#include "tests/testing/test_env.h"
#include "tests/testing/launch_util.h"

namespace osprey::testing {

struct Child {
  std::string name;
  pid_t pid = -1;
  bool reaped = false;
  int status = 0;
};

// The processes of one job; whatever still runs at the end is killed and reaped.
class ProcessJob {
  using Clock = std::chrono::steady_clock;

 public:
  ProcessJob(const std::string& config, std::vector<std::string> sets, const std::string& dir) : dir_(dir) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    bin_ = EnvOr("OSPREY_BIN_DIR", "build/bin");
    // `config`: a file of configs/, or an absolute path.
    common_ = {"--config", config.rfind('/', 0) == 0 ? config : EnvOr("OSPREY_SOURCE_DIR", ".") + "/configs/" + config};
    endpoint_ = "tcp://127.0.0.1:" + std::to_string(FreePort());
    sets.push_back("cluster.coordinator=" + endpoint_);
    sets.push_back("checkpoint.dir=" + ckpt());
    for (const auto& s : sets) common_.insert(common_.end(), {"--set", s});
  }
  ~ProcessJob() {
    coord_.reset();
    for (auto& c : children_) {
      if (!c.reaped && c.pid > 0) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
    }
  }
  std::string ckpt() const { return dir_ + "/ckpt"; }
  std::string log(const std::string& name) const { return dir_ + "/" + name + ".log"; }

  // The coordinator, servers 0..servers-1 ("server-R") and workers ("worker-R").
  void Start(int servers = 2, int workers = 2) {
    Spawn("coordinator", "osprey-coordinator", {});
    for (int r = 0; r < servers; ++r) Spawn("server-" + std::to_string(r), "osprey-server", {"--rank", std::to_string(r)});
    for (int r = 0; r < workers; ++r) Spawn("worker-" + std::to_string(r), "osprey-worker", {"--rank", std::to_string(r)});
  }
  void Spawn(const std::string& name, const std::string& binary, std::vector<std::string> extra) {
    std::vector<std::string> args = common_;
    args.insert(args.end(), extra.begin(), extra.end());
    std::string path = bin_ + "/" + binary;
    std::string logp = log(name);
    const pid_t pid = osprey::testing::SpawnLogged(path, args, logp);
    children_.push_back(Child{name, pid});
  }
  Child& child(const std::string& name) {
    for (auto& c : children_) {
      if (c.name == name) return c;
    }
    throw std::runtime_error("no child " + name);
  }
  bool Exited(Child& c) {
    int st = 0;
    if (!c.reaped && ::waitpid(c.pid, &st, WNOHANG) == c.pid) {
      c.reaped = true;
      c.status = st;
    }
    return c.reaped;
  }
  // Polls `pred` every 20 ms until true or `seconds`; false early when a worker exited.
  bool WaitFor(const std::function<bool()>& pred, int seconds) {
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < deadline) {
      if (pred()) return true;
      for (auto& c : children_) {
        if (c.name.rfind("worker-", 0) == 0 && Exited(c)) return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  bool WaitAll(int seconds) {
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < deadline) {
      bool all = true;
      for (auto& c : children_) all = Exited(c) && all;
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // The coordinator's record of (role, rank); false when not known.
  bool Node(osprey::proto::Role role, int rank, osprey::proto::NodeState* out) {
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
      if (n.role() == role && n.rank() == rank) {
        *out = n;
        return true;
      }
    }
    return false;
  }
  long Step(int worker) {
    osprey::proto::NodeState n;
    return Node(osprey::proto::ROLE_WORKER, worker, &n) ? n.clock() : -1;
  }
  std::vector<Child>& children() { return children_; }

  // A bsp rollback (the bsp rollback tests): kills server-1 with SIGKILL, starts its replacement
  // `osprey-server --rank 1 --restore CKPT` at once and waits (at most `seconds`) until both
  // workers' logs say they rewound for rollback generation 1. cut < 0 when they did not.
  struct Rewound {
    long killed_step = -1;  // worker 0's step when server 1 was gone
    long from = -1;         // the step worker 0 rewound from
    long cut = -1;          // the cut's clock
    double seconds = 0;     // kill -> both workers rewound (log polled every 20 ms)
  };
  Rewound KillServer1AndAwaitRewind(int seconds) {
    Rewound r;
    Child& victim = child("server-1");
    if (::kill(victim.pid, SIGKILL) != 0) return r;
    const auto killed_at = Clock::now();
    while (!Exited(victim)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    r.killed_step = Step(0);
    Spawn("server-1-r1", "osprey-server", {"--rank", "1", "--restore", ckpt()});
    static const std::regex kRewound(R"(worker \d+ rewinds from step (\d+) to clock (\d+) \(bsp rollback generation 1\))");
    std::smatch m;
    const bool both = WaitFor([&] {
      const std::string w0 = ReadFile(log("worker-0")), w1 = ReadFile(log("worker-1"));
      return std::regex_search(w0, m, kRewound) && std::regex_search(w1, kRewound);
    }, seconds);
    if (!both) return r;
    r.seconds = std::chrono::duration<double>(Clock::now() - killed_at).count();
    r.from = std::stol(m[1]);
    r.cut = std::stol(m[2]);
    return r;
  }

  std::string Logs() const {
    std::string out;
    for (const auto& c : children_) out += "---- " + c.name + "\n" + ReadFile(log(c.name));
    return out;
  }

 private:
  std::string dir_, bin_, endpoint_;
  std::unique_ptr<osprey::coordinator::CoordinatorClient> coord_;
  std::vector<std::string> common_;
  std::vector<Child> children_;
};

}  // namespace osprey::testing
