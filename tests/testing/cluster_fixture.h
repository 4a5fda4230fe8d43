// Test helpers: in-process servers over the InprocTransport, and a raw peer that sends crafted
// messages and collects replies (to test frame validation without the client library).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/config/table_config.h"
#include "common/inproc_transport.h"
#include "proto/wire.h"
#include "server/server.h"

namespace osprey::testing {

// Tables used by the fixtures: a sparse table (dim 4, SGD lr 0.5) and a dense one (10 floats in
// chunks of 4, SGD lr 0.5).
inline std::vector<config::TableConfig> TestTables() {
  config::TableConfig sparse;
  sparse.name = "emb";
  sparse.type = config::TableType::kSparse;
  sparse.dim = 4;
  sparse.optimizer.lr = 0.5f;
  config::TableConfig dense;
  dense.name = "mlp";
  dense.type = config::TableType::kDense;
  dense.size = 10;
  dense.chunk_floats = 4;
  dense.optimizer.lr = 0.5f;
  return {sparse, dense};
}

inline proto::ShardMap MakeShardMap(const std::vector<std::string>& endpoints,
                                    const std::vector<config::TableConfig>& tables) {
  proto::ShardMap map;
  map.set_epoch(1);
  for (const auto& e : endpoints) map.add_server_endpoints(e);
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

// N in-process servers sharing one hub.
class InprocCluster {
 public:
  // Another transport for the same cluster (tests/rdma: RdmaTransport over loopback verbs): what
  // makes every server's and client's transport, and the endpoint server i listens on.
  using TransportFactory = std::function<std::unique_ptr<Transport>()>;
  using EndpointOf = std::function<std::string(int server)>;

  InprocCluster(int num_servers, std::vector<config::TableConfig> tables = TestTables(),
                TransportFactory factory = nullptr, EndpointOf endpoint_of = nullptr)
      : hub_(std::make_shared<InprocHub>()), tables_(std::move(tables)), factory_(std::move(factory)) {
    std::vector<std::string> endpoints;
    for (int i = 0; i < num_servers; ++i) {
      endpoints.push_back(endpoint_of ? endpoint_of(i) : "inproc://server-" + std::to_string(i));
    }
    map_ = MakeShardMap(endpoints, tables_);
    for (int i = 0; i < num_servers; ++i) {
      auto store = server::MakeStore("native");
      servers_.push_back(std::make_unique<server::Server>(
          NewTransport(), std::move(*store)));
      auto bound = servers_.back()->Listen(endpoints[i]);
      if (!bound.ok()) throw std::runtime_error(bound.status().ToString());
    }
  }
  Status ActivateAll() {
    for (size_t i = 0; i < servers_.size(); ++i) {
      OSPREY_RETURN_IF_ERROR(servers_[i]->Activate(static_cast<int>(i), map_, tables_));
    }
    return Status::OK();
  }
  std::unique_ptr<Transport> NewTransport() {
    return factory_ ? factory_() : std::make_unique<InprocTransport>(hub_);
  }
  server::Server& server(int i) { return *servers_[i]; }
  const proto::ShardMap& map() const { return map_; }
  const std::vector<config::TableConfig>& tables() const { return tables_; }
  std::shared_ptr<InprocHub> hub() const { return hub_; }

 private:
  std::shared_ptr<InprocHub> hub_;
  std::vector<config::TableConfig> tables_;
  TransportFactory factory_;
  proto::ShardMap map_;
  std::vector<std::unique_ptr<server::Server>> servers_;
};

// Sends hand-made messages to one endpoint and waits for replies (bounded waits).
class RawPeer {
 public:
  RawPeer(std::unique_ptr<Transport> transport, const std::string& endpoint)
      : transport_(std::move(transport)) {
    transport_->SetHandler([this](Message&& m) {
      std::lock_guard<std::mutex> lock(mu_);
      replies_.push_back(std::move(m));
      cv_.notify_all();
    });
    peer_ = *transport_->Connect(endpoint);
    Status s = transport_->Start();
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  ~RawPeer() { transport_->Stop(); }

  // The role every later Send claims (the in-process transport delivers it as the sender's).
  void set_role(PeerRole role) { role_ = role; }

  void Send(Buffer header, Buffer keys, Buffer values) {
    Message m;
    m.peer = peer_;
    m.peer_role = role_;
    m.header = std::move(header);
    m.keys = std::move(keys);
    m.values = std::move(values);
    Status s = transport_->Send(std::move(m));
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  void Send(const proto::Header& h, Buffer keys, Buffer values) {
    Send(SerializeHeader(h), std::move(keys), std::move(values));
  }
  // Next reply (header parsed) within 5 s; false on timeout.
  bool Next(proto::Header* header, Buffer* values) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::seconds(5), [&] { return !replies_.empty(); })) return false;
    Message m = std::move(replies_.front());
    replies_.pop_front();
    header->ParseFromArray(m.header.data(), static_cast<int>(m.header.size()));
    if (values) *values = m.values;
    return true;
  }

 private:
  std::unique_ptr<Transport> transport_;
  PeerId peer_ = -1;
  PeerRole role_ = PeerRole::kUnauthenticated;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> replies_;
};

template <typename T>
Buffer VecBuf(std::vector<T> v) {
  return Buffer::FromVector(std::move(v));
}

}  // namespace osprey::testing
