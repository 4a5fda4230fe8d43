// ServerProcess: a real osprey server (server::Server over a ZeroMQ transport and a native store)
// running in a forked child process, for osprey-bench-transport.
//
// Why a child process: a worker and a server of a job live in two processes, with separate
// heaps, malloc arenas and ZeroMQ contexts; a server thread inside the benchmark's process would
// share those with the client and flatter (or skew) the numbers. The fork happens through
// bench::ChildServer (bench/transport_raw/child_server.h), which also hands the bound endpoint
// back over a pipe, kills the child with SIGKILL when the ServerProcess dies and makes the child
// die with its parent (PR_SET_PDEATHSIG), so an aborted benchmark leaves no server behind.
//
// The child binds tcp://127.0.0.1:0 (any free port) or a fresh ipc:///tmp/osprey-bench-*.sock,
// activates itself as rank 0 of a one-server shard map of `tables` (BenchShardMap), reports its
// endpoint and then serves until it is killed.
//
// Threading: Start() forks without exec, so it must be called while the process has exactly one
// thread (no ZeroMQ context, no client): a lock held by another thread at fork time would stay
// locked forever in the child. Start() checks this and returns FailedPrecondition otherwise.
// A ServerProcess is used by one thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench/transport_raw/child_server.h"
#include "common/config/table_config.h"
#include "common/status.h"
#include "common/transport.h"
#include "proto/wire.h"

namespace osprey::bench {

// The shard map every benchmark process agrees on: epoch 1, one server at `endpoint`, and
// `tables` with ids 0..n-1 in order.
proto::ShardMap BenchShardMap(const std::string& endpoint,
                              const std::vector<config::TableConfig>& tables);

// Threads of the calling process (from /proc/self/status); -1 when it cannot be read.
int ThreadCount();

// OK once the calling process has one thread; FailedPrecondition naming `what` and the count
// when it still has more after `timeout_ms`. A thread that was just joined (a client's, or a
// ZeroMQ context's I/O thread) can stay in /proc/self/status for a moment after the join
// returns, so a process about to fork waits for the count instead of reading it once.
Status AwaitSingleThreaded(const std::string& what, int timeout_ms = 5000);

class ServerProcess {
 public:
  // Forks the server for `transport` ("tcp" or "ipc") and waits (<= 10 s) for its endpoint.
  // Errors: FailedPrecondition (more than one thread), InvalidArgument (bad transport),
  // Internal (fork failed), DeadlineExceeded (the child failed to bind or activate; it prints
  // why on stderr).
  // `keys_dir` non-empty: the server listens with CURVE (the server keys of that directory, as
  // `osprey keygen` writes them) and client_options() carry the worker keys. `apply_threads`:
  // the server's cluster.server_apply_threads.
  static StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::string& transport, const std::vector<config::TableConfig>& tables,
      const std::string& keys_dir = "", int apply_threads = 1);

  // Kills and reaps the child; removes its ipc socket file.
  ~ServerProcess();

  const std::string& endpoint() const { return child_->endpoint(); }
  // The map the server was activated with (give it to the worker::Client).
  const proto::ShardMap& shard_map() const { return map_; }
  // What a client of this server connects with (plain, or CURVE as a worker).
  const TransportOptions& client_options() const { return client_options_; }
  // CPU seconds the server process has used so far (all threads; ChildServer::CpuSecondsSoFar).
  double CpuSeconds() const { return child_->CpuSecondsSoFar(); }

 private:
  ServerProcess() = default;

  std::unique_ptr<ChildServer> child_;
  std::string ipc_path_;  // empty for tcp
  proto::ShardMap map_;
  TransportOptions client_options_;
};

}  // namespace osprey::bench
