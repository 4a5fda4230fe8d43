// LocalRedis: the Redis that `osprey launch` starts for a job whose config says
// store.redis.local: node | cluster -- one redis-server, or three cluster-enabled ones joined with
// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes` -- on free loopback ports,
// with its data and logs under LOG_DIR/redis/, no persistence. Start returns once the node answers
// PING (cluster: every node says cluster_state:ok); endpoints() is what the servers are given
// (store.redis.endpoints). The processes are children of the launcher (ChildSet: own process
// group, PDEATHSIG), stopped by the destructor or Stop.
//
// Thread-safety: none; the launcher's main thread (the one that forks).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "tools/child_process.h"

namespace osprey::tools {

class LocalRedis {
 public:
  // Unavailable naming the failing step (redis-server missing, a node not ready in 20 s, the
  // cluster create's output).
  static StatusOr<std::unique_ptr<LocalRedis>> Start(const std::string& log_dir, bool cluster);
  ~LocalRedis() { Stop(); }
  void Stop();
  // "127.0.0.1:P[,127.0.0.1:P...]"
  const std::string& endpoints() const { return endpoints_; }

 private:
  LocalRedis() = default;
  ChildSet children_;
  std::string endpoints_;
};

}  // namespace osprey::tools
