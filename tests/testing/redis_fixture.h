// Real Redis for tests: RedisServer starts one `redis-server` child on a free loopback port under
// a temp dir (no persistence) and waits until it answers PING; RedisTestCluster starts three
// cluster-enabled servers, joins them with `redis-cli --cluster create ... --cluster-replicas 0
// --cluster-yes` and waits until every node says cluster_state:ok and all agree on the slot map.
// Destructors stop the servers by pid (SIGKILL, then waitpid) and remove the temp dir; children
// also die with the test process (PR_SET_PDEATHSIG), so a crashed test leaks no server. (The
// signal follows the starting *thread*: start servers from a thread that outlives them.)
//
//   auto node = RedisServer::Start();            // ASSERT_TRUE(node.ok())
//   RedisOptions o; o.seeds = {(*node)->endpoint()};
//
// Thread-safety: none; use from the test's thread.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/redis/redis_client.h"
#include "common/status.h"
#include "tests/testing/free_port.h"
#include "tests/testing/launch_util.h"
#include "tests/testing/wait.h"

namespace osprey::testing {

// A fresh directory under $TMPDIR (or /tmp), removed by the owner.
inline std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = EnvOr("TMPDIR", "/tmp") + "/osprey-" + tag + "-XXXXXX";
  char* dir = ::mkdtemp(tmpl.data());
  return dir ? std::string(dir) : std::string();
}

// One redis-server child process.
class RedisServer {
 public:
  struct Options {
    std::string password;             // --requirepass when set
    bool cluster = false;             // --cluster-enabled yes (cluster-port: a second free port)
    std::vector<std::string> extra;   // more redis-server arguments
    std::string dir;                  // "" = a temp dir of its own (removed by the destructor)
  };

  static StatusOr<std::unique_ptr<RedisServer>> Start() { return Start(Options()); }
  static StatusOr<std::unique_ptr<RedisServer>> Start(const Options& options) {
    Status last = Unavailable("redis-server did not start");
    // FreePort can race with another process taking the port: try a few.
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::unique_ptr<RedisServer> s(new RedisServer());
      s->owns_dir_ = options.dir.empty();
      s->dir_ = s->owns_dir_ ? MakeTempDir("redis") : options.dir;
      if (s->dir_.empty()) return Internal("cannot create a temp dir for redis-server");
      s->port_ = FreePort();
      std::vector<std::string> argv = {"redis-server", "--port", std::to_string(s->port_), "--bind",
                                       "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
                                       s->dir_, "--daemonize", "no", "--logfile",
                                       s->dir_ + "/redis-" + std::to_string(s->port_) + ".log"};
      if (!options.password.empty()) argv.insert(argv.end(), {"--requirepass", options.password});
      if (options.cluster) {
        argv.insert(argv.end(), {"--cluster-enabled", "yes", "--cluster-config-file",
                                 s->dir_ + "/nodes-" + std::to_string(s->port_) + ".conf",
                                 "--cluster-port", std::to_string(FreePort())});
      }
      argv.insert(argv.end(), options.extra.begin(), options.extra.end());
      s->Spawn(argv);
      s->password_ = options.password;
      last = s->WaitReady();
      if (last.ok()) return s;
    }
    return last;
  }

  ~RedisServer() {
    Kill9();
    if (owns_dir_ && !dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  redis::Endpoint endpoint() const { return {"127.0.0.1", port_}; }
  bool running() const { return pid_ > 0; }

  // SIGKILL and reap: the "Redis crashed" of fault tests; also what the destructor does.
  void Kill9() {
    admin_.reset();
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);  // a SIGSTOPped server still dies, but reap promptly either way
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void Pause() { ::kill(pid_, SIGSTOP); }    // the server stops answering (io timeout tests)
  void Resume() { ::kill(pid_, SIGCONT); }

  // A single-node client on this server (admin commands in tests), short timeouts.
  StatusOr<std::unique_ptr<redis::RedisClient>> Admin() const {
    redis::RedisOptions o;
    o.seeds = {endpoint()};
    o.password = password_;
    o.connect_timeout_ms = 500;
    o.io_timeout_ms = 5000;
    o.max_retries = 0;
    return redis::RedisClient::Connect(o);
  }
  // One command on this node; its reply (an error reply naming the Status on failure to
  // deliver). The admin connection is kept between calls (polling loops would otherwise leave
  // thousands of sockets in TIME_WAIT) and reopened after a failure.
  redis::Reply Call(std::vector<std::string> args) const {
    redis::Reply r;
    r.type = redis::Reply::Type::kError;
    if (!admin_) {
      auto admin = Admin();
      if (!admin.ok()) {
        r.str = admin.status().ToString();
        return r;
      }
      admin_ = std::move(admin).value();
    }
    std::vector<redis::Reply> replies;
    Status st = admin_->Execute({{std::move(args), -1}}, &replies);
    if (!st.ok()) {
      admin_.reset();
      r.str = st.ToString();
      return r;
    }
    return replies[0];
  }

 private:
  RedisServer() = default;

  void Spawn(const std::vector<std::string>& argv) {
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    for (std::string& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const std::string out_path = dir_ + "/stdout-" + std::to_string(port_) + ".txt";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (out < 0 || ::dup2(out, 1) < 0 || ::dup2(out, 2) < 0) ::_exit(120);
      ::execvp(cargv[0], cargv.data());
      ::_exit(121);
    }
  }

  Status WaitReady() {
    bool exited = false;
    const bool up = WaitUntil(
        [&] {
          int status = 0;
          if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            exited = true;
            pid_ = -1;
            return true;
          }
          redis::Reply pong = Call({"PING"});
          return pong.type == redis::Reply::Type::kStatus && pong.str == "PONG";
        },
        std::chrono::seconds(10));
    if (up && !exited) return Status::OK();
    const std::string log = ReadFile(dir_ + "/redis-" + std::to_string(port_) + ".log");
    Kill9();
    return Unavailable("redis-server on port " + std::to_string(port_) +
                       (exited ? " exited" : " did not answer PING within 10 s") + "; log tail: " +
                       log.substr(log.size() > 800 ? log.size() - 800 : 0));
  }

  std::string dir_;
  bool owns_dir_ = false;
  int port_ = -1;
  pid_t pid_ = -1;
  std::string password_;
  mutable std::unique_ptr<redis::RedisClient> admin_;  // Call's connection, opened on first use
};

// Three masters, no replicas, all slots assigned by `redis-cli --cluster create`. With a
// password every node has --requirepass and --masterauth, and redis-cli authenticates with -a.
class RedisTestCluster {
 public:
  // `extra`: more redis-server arguments for every node (e.g. a short --cluster-node-timeout).
  static StatusOr<std::unique_ptr<RedisTestCluster>> Start(int num_masters = 3,
                                                          const std::string& password = "",
                                                          const std::vector<std::string>& extra = {}) {
    std::unique_ptr<RedisTestCluster> c(new RedisTestCluster());
    c->dir_ = MakeTempDir("redis-cluster");
    if (c->dir_.empty()) return Internal("cannot create a temp dir for the redis cluster");
    std::string create = "redis-cli";
    if (!password.empty()) create += " --no-auth-warning -a '" + password + "'";
    create += " --cluster create";
    for (int i = 0; i < num_masters; ++i) {
      RedisServer::Options o;
      o.cluster = true;
      o.dir = c->dir_;
      o.password = password;
      o.extra = extra;
      if (!password.empty()) o.extra.insert(o.extra.end(), {"--masterauth", password});
      OSPREY_ASSIGN_OR_RETURN(auto node, RedisServer::Start(o));
      create += " 127.0.0.1:" + std::to_string(node->port());
      c->nodes_.push_back(std::move(node));
    }
    create += " --cluster-replicas 0 --cluster-yes > " + c->dir_ + "/create.log 2>&1";
    if (RunCommand(create) != 0) {
      return Unavailable("redis-cli --cluster create failed: " + ReadFile(c->dir_ + "/create.log"));
    }
    if (!WaitUntil([&] { return c->Agreed(); }, std::chrono::seconds(20))) {
      return Unavailable("redis cluster did not reach cluster_state:ok on every node within 20 s");
    }
    return c;
  }

  ~RedisTestCluster() {
    nodes_.clear();  // kills every node
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  size_t size() const { return nodes_.size(); }
  RedisServer& node(size_t i) { return *nodes_[i]; }
  std::vector<redis::Endpoint> endpoints() const {
    std::vector<redis::Endpoint> out;
    for (const auto& n : nodes_) out.push_back(n->endpoint());
    return out;
  }
  // The node whose port is `port`; nullptr when none.
  RedisServer* NodeOnPort(int port) {
    for (auto& n : nodes_) {
      if (n->port() == port) return n.get();
    }
    return nullptr;
  }
  // CLUSTER MYID of node i.
  std::string NodeId(size_t i) const { return nodes_[i]->Call({"CLUSTER", "MYID"}).str; }
  // The port of the master that node i says owns `slot`; -1 when unknown.
  int OwnerPort(size_t i, int slot) const {
    redis::Reply slots = nodes_[i]->Call({"CLUSTER", "SLOTS"});
    for (const redis::Reply& r : slots.elements) {
      if (r.elements.size() >= 3 && r.elements[0].integer <= slot && slot <= r.elements[1].integer) {
        return static_cast<int>(r.elements[2].elements[1].integer);
      }
    }
    return -1;
  }

  // Every running node says cluster_state:ok and all list the same slot ranges and owners.
  bool Agreed() const {
    std::string first;
    for (const auto& n : nodes_) {
      if (!n->running()) continue;
      redis::Reply info = n->Call({"CLUSTER", "INFO"});
      if (info.str.find("cluster_state:ok") == std::string::npos) return false;
      std::vector<std::string> ranges;
      for (const redis::Reply& r : n->Call({"CLUSTER", "SLOTS"}).elements) {
        if (r.elements.size() < 3 || r.elements[2].elements.size() < 2) return false;
        ranges.push_back(std::to_string(r.elements[0].integer) + "-" + std::to_string(r.elements[1].integer) +
                         "@" + std::to_string(r.elements[2].elements[1].integer));
      }
      std::sort(ranges.begin(), ranges.end());
      std::string joined;
      for (const auto& s : ranges) joined += s + ",";
      if (first.empty()) first = joined;
      if (joined.empty() || joined != first) return false;
    }
    return true;
  }

 private:
  RedisTestCluster() = default;
  std::string dir_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace osprey::testing
