#include "bench/transport/server_process.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "bench/transport_raw/raw_zmq_bench.h"
#include "common/transport.h"
#include "common/zmq_curve.h"
#include "server/server.h"
#include "server/store.h"

namespace osprey::bench {
namespace {

// The child's body: never returns while serving (the parent SIGKILLs it); returns an exit code
// when setup fails, after saying why on stderr (the parent then sees no endpoint).
int Serve(const std::string& listen, const std::vector<config::TableConfig>& tables,
          const TransportOptions& options, int apply_threads, const ChildServer::ReadyFn& ready) {
  auto fail = [](const char* what, const Status& s) {
    std::fprintf(stderr, "bench server: %s: %s\n", what, s.ToString().c_str());
    return 2;
  };
  auto transport = MakeTransport(options);
  if (!transport.ok()) return fail("transport", transport.status());
  auto store = server::MakeStore("native");
  if (!store.ok()) return fail("store", store.status());
  server::Server srv(std::move(*transport), std::move(*store));
  srv.SetRolesRequired(options.curve.enabled);
  srv.SetApplyThreads(apply_threads);
  auto bound = srv.Listen(listen);
  if (!bound.ok()) return fail("listen", bound.status());
  Status s = srv.Activate(0, BenchShardMap(*bound, tables), tables);
  if (!s.ok()) return fail("activate", s);
  ready(*bound);
  while (true) ::pause();  // requests are served on the transport's I/O thread
}

}  // namespace

proto::ShardMap BenchShardMap(const std::string& endpoint,
                              const std::vector<config::TableConfig>& tables) {
  // Same shape as tests/testing/cluster_fixture.h's MakeShardMap, for one server.
  proto::ShardMap map;
  map.set_epoch(1);
  map.add_server_endpoints(endpoint);
  for (size_t i = 0; i < tables.size(); ++i) {
    proto::TableSpec* t = map.add_tables();
    t->set_id(static_cast<uint32_t>(i));
    t->set_name(tables[i].name);
    t->set_type(tables[i].type == config::TableType::kSparse ? proto::TABLE_SPARSE : proto::TABLE_DENSE);
    t->set_dim(tables[i].dim);
    t->set_size(tables[i].size);
    t->set_chunk_floats(tables[i].chunk_floats);
  }
  return map;
}

int ThreadCount() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "Threads:") {
      int n = -1;
      in >> n;
      return n;
    }
    std::getline(in, key);
  }
  return -1;
}

Status AwaitSingleThreaded(const std::string& what, int timeout_ms) {
  int threads = ThreadCount();
  for (int waited_ms = 0; threads != 1 && waited_ms < timeout_ms; ++waited_ms) {
    usleep(1000);
    threads = ThreadCount();
  }
  if (threads == 1) return Status::OK();
  return FailedPrecondition(what + " must be forked from a single-threaded process (" +
                            std::to_string(threads) + " threads after " +
                            std::to_string(timeout_ms) + " ms)");
}

StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::string& transport, const std::vector<config::TableConfig>& tables,
    const std::string& keys_dir, int apply_threads) {
  OSPREY_RETURN_IF_ERROR(AwaitSingleThreaded("bench server"));
  OSPREY_ASSIGN_OR_RETURN(std::string listen, BenchListenEndpoint(transport));
  std::unique_ptr<ServerProcess> sp(new ServerProcess());
  TransportOptions server_options;
  if (!keys_dir.empty()) {
    OSPREY_ASSIGN_OR_RETURN(server_options.curve,
                            LoadCurveOptions(keys_dir, PeerRole::kServer, PeerRole::kUnauthenticated));
    OSPREY_ASSIGN_OR_RETURN(sp->client_options_.curve,
                            LoadCurveOptions(keys_dir, PeerRole::kWorker, PeerRole::kServer));
  }
  if (transport == "ipc") sp->ipc_path_ = listen.substr(6);
  std::fflush(stdout);  // the child must not inherit (and later repeat) buffered output
  std::fflush(stderr);
  OSPREY_ASSIGN_OR_RETURN(sp->child_,
                          ChildServer::Start(
                              [listen, tables, server_options, apply_threads](const ChildServer::ReadyFn& ready) {
                                return Serve(listen, tables, server_options, apply_threads, ready);
                              },
                              /*in_process=*/false));
  sp->map_ = BenchShardMap(sp->child_->endpoint(), tables);
  return sp;
}

ServerProcess::~ServerProcess() {
  child_.reset();  // SIGKILL + waitpid
  if (!ipc_path_.empty()) ::unlink(ipc_path_.c_str());
}

}  // namespace osprey::bench
