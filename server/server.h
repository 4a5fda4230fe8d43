// Server: one osprey-server's request handling over a Transport and a Store.
//
// Lifecycle: Listen() binds and starts the transport (requests that arrive before Activate() are
// held, not refused, because workers may learn the shard map a moment before this server does);
// Activate() gives the server its rank and the shard map, creates the tables it owns, and serves
// the held requests; Stop() stops the transport.
//
// Every request is validated before anything is applied: header parse, protocol version, op,
// table id and type, shard-map epoch, frame sizes against the header's counts, key and chunk
// ownership, codec, finite gradients. A bad request gets an OP_ERROR reply naming the problem and
// is counted in stats().bad_requests; nothing of it is applied and the server keeps serving.
//
// Threading: requests are handled on the transport's I/O thread, one at a time, so the Store needs
// no locks. Listen/Activate/Stop/stats may be called from any thread.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "common/transport.h"
#include "proto/wire.h"
#include "server/store.h"

namespace osprey::server {

struct ServerStatsSnapshot {
  uint64_t requests = 0;
  uint64_t bad_requests = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t pushes_applied = 0;
};

class Server {
 public:
  Server(std::unique_ptr<Transport> transport, std::unique_ptr<Store> store);
  ~Server();

  // Binds `endpoint` and starts serving (holding requests until Activate). Returns the bound
  // endpoint. Errors from Transport::Listen/Start.
  StatusOr<std::string> Listen(const std::string& endpoint);

  // Creates the tables of `tables` (same order as map.tables()) for server `rank` of the map and
  // serves held requests. InvalidArgument when the map and the tables disagree.
  Status Activate(int rank, const proto::ShardMap& map,
                  const std::vector<config::TableConfig>& tables);

  void Stop();

  ServerStatsSnapshot stats() const;
  int rank() const { return rank_; }

 private:
  struct TableState {
    proto::TableSpec spec;
    uint64_t num_chunks = 0;
    uint64_t version = 0;  // pushes applied
  };

  void OnMessage(Message&& msg);
  void Handle(Message&& msg);
  // Validates and executes one request; fills reply values. Errors become OP_ERROR replies.
  Status Execute(const proto::Header& h, const Message& msg, proto::Header* reply, Buffer* values);
  Status ValidateKeys(const proto::Header& h, const Message& msg, const TableState& t);
  Status CheckFinite(const proto::Header& h, const Message& msg, const TableState& t);
  void Reply(PeerId peer, const proto::Header& header, Buffer values);
  void ReplyError(PeerId peer, const proto::Header& request, const Status& status);

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Store> store_;

  std::mutex mu_;  // guards active_ and held_ (the hand-over between Listen and Activate)
  bool active_ = false;
  std::deque<Message> held_;

  // Written by Activate before active_ is set (under mu_), read-only afterwards on the I/O thread.
  int rank_ = -1;
  uint64_t epoch_ = 0;
  int num_servers_ = 0;
  std::vector<TableState> tables_;

  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bad_requests_{0};
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
  std::atomic<uint64_t> pushes_applied_{0};
};

}  // namespace osprey::server
