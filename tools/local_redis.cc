#include "tools/local_redis.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

namespace osprey::tools {
namespace {

StatusOr<int> FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return Unavailable("cannot reserve a loopback port for redis-server");
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

// Output of a shell command (stderr folded in), and its exit status in *rc.
std::string Run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) {
    *rc = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *rc = ::pclose(p);
  return out;
}

bool WaitFor(const std::string& cmd, const std::string& want) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    int rc;
    if (Run(cmd, &rc).find(want) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

StatusOr<std::unique_ptr<LocalRedis>> LocalRedis::Start(const std::string& log_dir, bool cluster) {
  std::unique_ptr<LocalRedis> r(new LocalRedis());
  const std::string dir = log_dir + "/redis";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable("cannot create " + dir + ": " + ec.message());
  std::vector<int> ports;
  for (int i = 0; i < (cluster ? 3 : 1); ++i) {
    OSPREY_ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
    const std::string p = std::to_string(port);
    std::vector<std::string> args = {"--port", p, "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", dir, "--daemonize", "no"};
    if (cluster) {
      OSPREY_ASSIGN_OR_RETURN(int bus, FreeLoopbackPort());
      args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file",
                               dir + "/nodes-" + p + ".conf", "--cluster-port",
                               std::to_string(bus)});
    }
    ChildSpec spec{"redis-" + p, "/usr/bin/redis-server", args, dir + "/redis-" + p + ".log", {}};
    if (!std::filesystem::exists(spec.binary)) spec.binary = "redis-server";
    auto idx = r->children_.Spawn(spec);
    if (!idx.ok()) {
      return Unavailable("cannot start redis-server (apt-get install redis-server): " +
                         idx.status().message());
    }
    ports.push_back(port);
  }
  for (int port : ports) {
    const std::string ep = "127.0.0.1:" + std::to_string(port);
    if (!WaitFor("redis-cli -p " + std::to_string(port) + " ping", "PONG")) {
      return Unavailable("local redis-server " + ep + " did not answer PING within 20 s (see " +
                         dir + ")");
    }
    r->endpoints_ += (r->endpoints_.empty() ? "" : ",") + ep;
  }
  if (cluster) {
    std::string cmd = "redis-cli --cluster create";
    for (int port : ports) cmd += " 127.0.0.1:" + std::to_string(port);
    cmd += " --cluster-replicas 0 --cluster-yes";
    int rc;
    std::string out = Run(cmd, &rc);
    if (rc != 0) return Unavailable("redis-cli --cluster create failed: " + out);
    for (int port : ports) {
      if (!WaitFor("redis-cli -p " + std::to_string(port) + " cluster info", "cluster_state:ok")) {
        return Unavailable("local redis cluster node 127.0.0.1:" + std::to_string(port) +
                           " not cluster_state:ok within 20 s");
      }
    }
  }
  return r;
}

void LocalRedis::Stop() { children_.StopAll(std::chrono::milliseconds(2000)); }

}  // namespace osprey::tools
