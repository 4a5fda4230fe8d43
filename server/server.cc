#include "server/server.h"

#include <cmath>

#include "common/logging.h"
#include "common/placement.h"

namespace osprey::server {
namespace {

Buffer AlignedFrame(const Buffer& b) {
  if (reinterpret_cast<uintptr_t>(b.data()) % alignof(uint64_t) == 0) return b;
  return Buffer::Copy(b.data(), b.size());
}

}  // namespace

Server::Server(std::unique_ptr<Transport> transport, std::unique_ptr<Store> store)
    : transport_(std::move(transport)), store_(std::move(store)) {}

Server::~Server() { Stop(); }

StatusOr<std::string> Server::Listen(const std::string& endpoint) {
  OSPREY_ASSIGN_OR_RETURN(std::string bound, transport_->Listen(endpoint));
  transport_->SetHandler([this](Message&& m) { OnMessage(std::move(m)); });
  OSPREY_RETURN_IF_ERROR(transport_->Start());
  return bound;
}

Status Server::Activate(int rank, const proto::ShardMap& map,
                        const std::vector<config::TableConfig>& tables) {
  if (map.tables_size() != static_cast<int>(tables.size())) {
    return InvalidArgument("shard map has " + std::to_string(map.tables_size()) +
                           " tables but the config has " + std::to_string(tables.size()));
  }
  if (rank < 0 || rank >= map.server_endpoints_size()) {
    return InvalidArgument("server rank " + std::to_string(rank) + " is outside the shard map");
  }
  std::lock_guard<std::mutex> lock(mu_);
  rank_ = rank;
  epoch_ = map.epoch();
  num_servers_ = map.server_endpoints_size();
  for (int i = 0; i < map.tables_size(); ++i) {
    const proto::TableSpec& spec = map.tables(i);
    TableState t;
    t.spec = spec;
    StoreTableSpec s;
    s.id = static_cast<uint32_t>(i);
    s.config = tables[i];
    if (spec.type() == proto::TABLE_DENSE) {
      if (spec.chunk_floats() == 0) return InvalidArgument("dense table with chunk_floats 0");
      t.num_chunks = (spec.size() + spec.chunk_floats() - 1) / spec.chunk_floats();
      for (uint64_t c = 0; c < t.num_chunks; ++c) {
        if (ServerForChunk(s.id, c, num_servers_) == rank_) s.owned_chunks.push_back(c);
      }
    }
    OSPREY_RETURN_IF_ERROR(store_->CreateTable(s));
    tables_.push_back(t);
  }
  active_ = true;
  // Serve what arrived early, in order, before new messages (which now take the direct path but
  // must wait on mu_, which we hold, so ordering is kept).
  while (!held_.empty()) {
    Handle(std::move(held_.front()));
    held_.pop_front();
  }
  return Status::OK();
}

void Server::Stop() { transport_->Stop(); }

ServerStatsSnapshot Server::stats() const {
  ServerStatsSnapshot s;
  s.requests = requests_.load();
  s.bad_requests = bad_requests_.load();
  s.bytes_in = bytes_in_.load();
  s.bytes_out = bytes_out_.load();
  s.pushes_applied = pushes_applied_.load();
  return s;
}

void Server::OnMessage(Message&& msg) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) {
      held_.push_back(std::move(msg));
      return;
    }
  }
  Handle(std::move(msg));
}

void Server::Handle(Message&& msg) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  bytes_in_.fetch_add(msg.bytes(), std::memory_order_relaxed);
  auto header = ParseHeader(msg.header);
  if (!header.ok()) {
    // Echo the request id when the header parses at all (e.g. only the version is wrong).
    proto::Header raw;
    if (!raw.ParseFromArray(msg.header.data(), static_cast<int>(msg.header.size()))) raw.Clear();
    ReplyError(msg.peer, raw, header.status());
    return;
  }
  // ZeroMQ may hand small frames back at any offset of its receive buffer; the store reads keys and
  // floats in place, so a misaligned frame is copied once (large frames are always aligned).
  msg.keys = AlignedFrame(msg.keys);
  msg.values = AlignedFrame(msg.values);
  proto::Header reply = ReplyHeader(*header);
  Buffer values;
  Status s = Execute(*header, msg, &reply, &values);
  if (!s.ok()) {
    ReplyError(msg.peer, *header, s);
    return;
  }
  Reply(msg.peer, reply, std::move(values));
}

Status Server::Execute(const proto::Header& h, const Message& msg, proto::Header* reply,
                       Buffer* values) {
  if (h.op() == proto::OP_SERVER_STATS) {
    proto::ServerStats st;
    ServerStatsSnapshot s = stats();
    st.set_requests(s.requests);
    st.set_bad_requests(s.bad_requests);
    st.set_bytes_in(s.bytes_in);
    st.set_bytes_out(s.bytes_out);
    st.set_pushes_applied(s.pushes_applied);
    uint64_t rows = 0;
    for (size_t i = 0; i < tables_.size(); ++i) rows += store_->num_rows(static_cast<uint32_t>(i));
    st.set_rows(rows);
    *values = SerializeMessage(st);
    return Status::OK();
  }
  bool sparse_op = h.op() == proto::OP_PULL_SPARSE || h.op() == proto::OP_PUSH_SPARSE;
  bool dense_op = h.op() == proto::OP_PULL_DENSE || h.op() == proto::OP_PUSH_DENSE ||
                  h.op() == proto::OP_INIT_DENSE;
  if (!sparse_op && !dense_op) {
    return InvalidArgument("op " + std::to_string(h.op()) + " is not a server request");
  }
  if (h.table() >= tables_.size()) {
    return InvalidArgument("table id " + std::to_string(h.table()) + " does not exist (" +
                           std::to_string(tables_.size()) + " tables)");
  }
  TableState& t = tables_[h.table()];
  if (sparse_op != (t.spec.type() == proto::TABLE_SPARSE)) {
    return InvalidArgument("table '" + t.spec.name() + "' is " +
                           (sparse_op ? "dense" : "sparse") + " but the op is for " +
                           (sparse_op ? "sparse" : "dense") + " tables");
  }
  if (h.epoch() != epoch_) {
    return FailedPrecondition("shard-map epoch " + std::to_string(h.epoch()) +
                              " is not the current epoch " + std::to_string(epoch_));
  }
  if (h.codec() != proto::CODEC_NONE) {
    return InvalidArgument("codec " + std::to_string(h.codec()) + " is not supported for table '" +
                           t.spec.name() + "'");
  }
  OSPREY_RETURN_IF_ERROR(ValidateKeys(h, msg, t));
  const uint64_t* keys = msg.keys.as<uint64_t>();
  size_t n = h.num_keys();
  uint32_t id = h.table();
  size_t floats = sparse_op ? n * t.spec.dim() : 0;
  if (dense_op) {
    for (size_t i = 0; i < n; ++i) floats += store_->ChunkFloats(id, keys[i]);
  }
  bool is_pull = h.op() == proto::OP_PULL_SPARSE || h.op() == proto::OP_PULL_DENSE;
  size_t want_bytes = is_pull ? 0 : floats * sizeof(float);
  if (msg.values.size() != want_bytes || h.value_bytes() != want_bytes) {
    return InvalidArgument("table '" + t.spec.name() + "': values frame has " +
                           std::to_string(msg.values.size()) + " bytes (header says " +
                           std::to_string(h.value_bytes()) + ") but " + std::to_string(n) +
                           " keys need " + std::to_string(want_bytes));
  }
  if (is_pull) {
    *values = Buffer::Allocate(floats * sizeof(float));
    float* out = reinterpret_cast<float*>(values->mutable_data());
    OSPREY_RETURN_IF_ERROR(sparse_op ? store_->PullRows(id, keys, n, out)
                                     : store_->PullChunks(id, keys, n, out));
  } else {
    const float* g = msg.values.as<float>();
    if (h.op() == proto::OP_INIT_DENSE) {
      OSPREY_RETURN_IF_ERROR(store_->InitChunks(id, keys, n, g));
    } else {
      OSPREY_RETURN_IF_ERROR(CheckFinite(h, msg, t));
      ApplyOptions opts;
      OSPREY_RETURN_IF_ERROR(sparse_op ? store_->PushRows(id, keys, n, g, opts)
                                       : store_->PushChunks(id, keys, n, g, opts));
      ++t.version;
      pushes_applied_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  reply->set_version(t.version);
  reply->set_num_keys(0);
  reply->set_value_bytes(values->size());
  return Status::OK();
}

Status Server::ValidateKeys(const proto::Header& h, const Message& msg, const TableState& t) {
  if (msg.keys.size() != h.num_keys() * sizeof(uint64_t)) {
    return InvalidArgument("table '" + t.spec.name() + "': keys frame has " +
                           std::to_string(msg.keys.size()) + " bytes but num_keys is " +
                           std::to_string(h.num_keys()));
  }
  const uint64_t* keys = msg.keys.as<uint64_t>();
  uint32_t id = h.table();
  bool sparse = t.spec.type() == proto::TABLE_SPARSE;
  for (size_t i = 0; i < h.num_keys(); ++i) {
    if (!sparse && keys[i] >= t.num_chunks) {
      return InvalidArgument("table '" + t.spec.name() + "': chunk " + std::to_string(keys[i]) +
                             " does not exist (" + std::to_string(t.num_chunks) + " chunks)");
    }
    int owner = sparse ? ServerForKey(id, keys[i], num_servers_) : ServerForChunk(id, keys[i], num_servers_);
    if (owner != rank_) {
      return FailedPrecondition("table '" + t.spec.name() + "': " + (sparse ? "key " : "chunk ") +
                                std::to_string(keys[i]) + " belongs to server " +
                                std::to_string(owner) + ", not to server " + std::to_string(rank_));
    }
  }
  return Status::OK();
}

Status Server::CheckFinite(const proto::Header& h, const Message& msg, const TableState& t) {
  const float* g = msg.values.as<float>();
  size_t n = msg.values.size() / sizeof(float);
  if (AllFinite(g, n)) return Status::OK();
  size_t width = t.spec.type() == proto::TABLE_SPARSE ? t.spec.dim() : 1;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(g[i])) {
      std::string where = t.spec.type() == proto::TABLE_SPARSE
                              ? "key " + std::to_string(msg.keys.as<uint64_t>()[i / width])
                              : "float " + std::to_string(i) + " of the pushed chunks";
      return InvalidArgument("table '" + t.spec.name() + "': non-finite gradient at " + where +
                             "; push rejected, nothing applied");
    }
  }
  return Status::OK();
}

void Server::Reply(PeerId peer, const proto::Header& header, Buffer values) {
  Message m;
  m.peer = peer;
  m.header = SerializeHeader(header);
  m.values = std::move(values);
  bytes_out_.fetch_add(m.bytes(), std::memory_order_relaxed);
  Status s = transport_->Send(std::move(m));
  if (!s.ok()) OSPREY_LOG_WARN("reply to peer {} failed: {}", peer, s.ToString());
}

void Server::ReplyError(PeerId peer, const proto::Header& request, const Status& status) {
  bad_requests_.fetch_add(1, std::memory_order_relaxed);
  OSPREY_LOG_WARN("bad request {} from peer {}: {}", request.request_id(), peer, status.ToString());
  Reply(peer, ErrorHeader(request, status), Buffer());
}

}  // namespace osprey::server
