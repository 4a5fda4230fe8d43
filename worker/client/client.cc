#include "worker/client/client.h"

#include <chrono>
#include <cstring>

#include "common/codec/encoded.h"
#include "common/codec/row_cast.h"
#include "common/placement.h"

namespace osprey::worker {

using Clock = std::chrono::steady_clock;

namespace {

// Wire type of sparse rows sent or received with `codec` (none, fp16 or bf16).
codec::ValueType RowType(proto::Codec codec) {
  switch (codec) {
    case proto::CODEC_FP16: return codec::ValueType::kFp16;
    case proto::CODEC_BF16: return codec::ValueType::kBf16;
    default: return codec::ValueType::kFp32;
  }
}

// Marks a sparse request header as carrying (push) or asking for (pull) `floats` row values in
// `codec` (encoded.h's fp16 / bf16 layout; the count is the decoded length).
void SetRowCodec(proto::Codec codec, size_t floats, proto::Header* h) {
  if (codec == proto::CODEC_NONE) return;
  h->set_codec(codec);
  h->set_codec_count(floats);
  h->set_codec_value_type(static_cast<uint32_t>(RowType(codec)));
}

}  // namespace

struct Client::Part {
  Ticket ticket = 0;
  int server = 0;
  proto::Op op = proto::OP_UNSPECIFIED;
  uint32_t table = 0;
  float* out = nullptr;                 // pulls: the caller's output
  Buffer* out_frame = nullptr;          // dense pull: takes the reply frame itself (no copy)
  std::vector<uint32_t> positions;      // sparse pull: row index in `out` of each key sent
                                        // (empty: the keys are the call's keys, in order)
  const DenseRoute* route = nullptr;    // dense: the chunks of the message (owned by the client)
  size_t expect_bytes = 0;              // pulls: reply values size
  bool clock_only = false;              // dense pull outside a server mask: no keys, no values
  Buffer reply;                         // pulls: the reply's values frame, until Wait copies it
  codec::ValueType reply_type = codec::ValueType::kFp32;  // sparse pull: wire type of its rows
};

struct Client::TicketState {
  proto::Op op = proto::OP_UNSPECIFIED;
  uint32_t table = 0;
  int remaining = 0;
  Status status;
  Clock::time_point deadline;
  // Pull parts whose reply arrived; Wait delivers them into the caller's memory, on its own
  // thread, once the ticket is done (the I/O thread never copies rows).
  std::vector<std::unique_ptr<Part>> arrived;
};

Client::Client(const ClientOptions& options, std::unique_ptr<Transport> transport,
               const proto::ShardMap& shard_map)
    : options_(options), transport_(std::move(transport)), map_(shard_map) {
  versions_.assign(map_.tables_size(), 0);
  sparse_codecs_.assign(map_.tables_size(), proto::CODEC_NONE);
  pull_codecs_.assign(map_.tables_size(), proto::CODEC_NONE);
  // Dense placement is fixed for the shard map's epoch: route every dense table once.
  int num_servers = map_.server_endpoints_size();
  dense_routes_.resize(map_.tables_size());
  for (int t = 0; t < map_.tables_size(); ++t) {
    const proto::TableSpec& spec = map_.tables(t);
    if (spec.type() != proto::TABLE_DENSE || spec.chunk_floats() == 0) continue;
    uint64_t size = spec.size(), chunk = spec.chunk_floats();
    std::vector<std::vector<uint64_t>> chunks(num_servers);
    for (uint64_t c = 0; c * chunk < size; ++c) {
      chunks[ServerForChunk(static_cast<uint32_t>(t), c, num_servers)].push_back(c);
    }
    for (int s = 0; s < num_servers; ++s) {
      if (chunks[s].empty()) continue;
      DenseRoute r;
      r.server = s;
      r.keys = Buffer::Copy(chunks[s].data(), chunks[s].size() * sizeof(uint64_t));
      for (size_t i = 0; i < chunks[s].size(); ++i) {
        uint64_t first = chunks[s][i] * chunk, len = std::min(chunk, size - first);
        r.ranges.emplace_back(first, len);
        r.floats += len;
        r.contiguous = r.contiguous && (i == 0 || chunks[s][i] == chunks[s][i - 1] + 1);
      }
      dense_routes_[t].push_back(std::move(r));
    }
  }
}

Client::~Client() { Stop(); }

Status Client::Start() {
  transport_->SetHandler([this](Message&& m) { OnReply(std::move(m)); });
  for (int i = 0; i < map_.server_endpoints_size(); ++i) {
    auto peer = transport_->Connect(map_.server_endpoints(i));
    if (!peer.ok()) return peer.status().WithContext("connecting to server " + std::to_string(i));
    peers_.push_back(*peer);
    server_of_peer_[*peer] = i;
  }
  return transport_->Start();
}

void Client::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& [id, t] : tickets_) FailTicketLocked(t.get(), Aborted("client stopped"));
    pending_.clear();
    inflight_ = 0;
  }
  cv_.notify_all();
  transport_->Stop();
}

StatusOr<uint32_t> Client::TableId(const std::string& name) const {
  std::string names;
  for (int i = 0; i < map_.tables_size(); ++i) {
    if (map_.tables(i).name() == name) return static_cast<uint32_t>(i);
    names += (names.empty() ? "" : ", ") + map_.tables(i).name();
  }
  return NotFound("table '" + name + "' is not in the shard map (tables: " + names + ")");
}

Status Client::CheckTable(uint32_t table, bool sparse) const {
  if (table >= static_cast<uint32_t>(map_.tables_size())) {
    return InvalidArgument("table id " + std::to_string(table) + " does not exist");
  }
  bool is_sparse = map_.tables(table).type() == proto::TABLE_SPARSE;
  if (is_sparse != sparse) {
    return InvalidArgument("table '" + map_.tables(table).name() + "' is " +
                           (is_sparse ? "sparse" : "dense") + "; use the " +
                           (is_sparse ? "sparse" : "dense") + " calls");
  }
  return Status::OK();
}

std::string Client::Describe(proto::Op op, uint32_t table) const {
  const char* verb = "request to";
  switch (op) {
    case proto::OP_PULL_SPARSE: verb = "pull of"; break;
    case proto::OP_PUSH_SPARSE: verb = "push to"; break;
    case proto::OP_PULL_DENSE: verb = "dense pull of"; break;
    case proto::OP_PUSH_DENSE: verb = "dense push to"; break;
    case proto::OP_INIT_DENSE: verb = "dense init of"; break;
    default: break;
  }
  std::string name = table < static_cast<uint32_t>(map_.tables_size())
                         ? "'" + map_.tables(table).name() + "'"
                         : std::to_string(table);
  return std::string(verb) + " table " + name;
}

Status Client::SetSparseRowCodec(uint32_t table, proto::Codec codec) {
  return SetTableRowCodec(table, codec, "sent", &sparse_codecs_);
}

Status Client::SetSparsePullCodec(uint32_t table, proto::Codec codec) {
  return SetTableRowCodec(table, codec, "pulled", &pull_codecs_);
}

Status Client::SetTableRowCodec(uint32_t table, proto::Codec codec, const char* verb,
                                 std::vector<proto::Codec>* codecs) {
  OSPREY_RETURN_IF_ERROR(CheckTable(table, /*sparse=*/true));
  if (codec != proto::CODEC_NONE && codec != proto::CODEC_FP16 && codec != proto::CODEC_BF16) {
    return InvalidArgument("sparse table '" + map_.tables(table).name() + "': rows can be " + verb +
                           " as fp32, fp16 or bf16, not with codec " +
                           codec::CodecIdName(static_cast<codec::CodecId>(codec)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  (*codecs)[table] = codec;
  return Status::OK();
}

void Client::SetDenseEncoder(uint32_t table, DenseEncoder encoder) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dense_encoders_.size() <= table) dense_encoders_.resize(table + 1);
  dense_encoders_[table] = std::move(encoder);
}

Ticket Client::NewTicket(proto::Op op, uint32_t table, Status immediate) {
  std::lock_guard<std::mutex> lock(mu_);
  Ticket id = next_ticket_++;
  auto t = std::make_unique<TicketState>();
  t->op = op;
  t->table = table;
  t->status = stopped_ && immediate.ok() ? Aborted("client stopped") : immediate;
  t->deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  tickets_[id] = std::move(t);
  return id;
}

void Client::FailTicketLocked(TicketState* t, const Status& s) {
  if (t->status.ok()) t->status = s;
}

void Client::SendPart(Ticket ticket, int server, proto::Header header, Buffer keys, Buffer values,
                      std::unique_ptr<Part> part) {
  uint64_t request_id;
  {
    std::unique_lock<std::mutex> lock(mu_);
    TicketState* t = tickets_[ticket].get();
    bool room = cv_.wait_until(lock, t->deadline, [&] {
      return stopped_ || inflight_ < options_.max_inflight;
    });
    if (!t->status.ok()) return;
    if (stopped_ || !room) {
      FailTicketLocked(t, stopped_ ? Aborted("client stopped")
                                   : DeadlineExceeded(Describe(t->op, t->table) + ": in-flight window (" +
                                                      std::to_string(options_.max_inflight) +
                                                      ") stayed full for the whole timeout"));
      return;
    }
    request_id = next_request_id_++;
    part->ticket = ticket;
    part->server = server;
    pending_[request_id] = std::move(part);
    ++t->remaining;
    ++inflight_;
    ++stats_.requests;
    if (header.op() != proto::OP_PULL_SPARSE && header.op() != proto::OP_PULL_DENSE) {
      stats_.bytes_pushed += keys.size() + values.size();
    }
  }
  header.set_request_id(request_id);
  header.set_worker_rank(options_.worker_rank);
  header.set_epoch(map_.epoch());
  header.set_num_keys(keys.size() / sizeof(uint64_t));
  header.set_value_bytes(values.size());
  Message m;
  m.peer = peers_[server];
  m.header = SerializeHeader(header);
  m.keys = std::move(keys);
  m.values = std::move(values);
  Status s = transport_->Send(std::move(m));
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.erase(request_id) > 0) {
      --inflight_;
      TicketState* t = tickets_[ticket].get();
      --t->remaining;
      FailTicketLocked(t, s.WithContext(Describe(t->op, t->table) + ": sending to server " +
                                        std::to_string(server)));
    }
    cv_.notify_all();
  }
}

Ticket Client::Pull(uint32_t table, const uint64_t* keys, size_t n, float* out, int64_t clock) {
  Status bad = CheckTable(table, /*sparse=*/true);
  Ticket ticket = NewTicket(proto::OP_PULL_SPARSE, table, bad);
  if (!bad.ok() || n == 0) return ticket;
  int num_servers = static_cast<int>(peers_.size());
  const size_t dim = map_.tables(table).dim();
  const proto::Codec pull_codec = pull_codecs_[table];
  const codec::ValueType reply_type = RowType(pull_codec);
  const size_t row_bytes = dim * codec::RowValueBytes(reply_type);
  proto::Header h;
  h.set_op(proto::OP_PULL_SPARSE);
  h.set_table(table);
  h.set_clock(clock);
  if (num_servers == 1) {  // no partitioning: one copy of the keys, rows land in place
    auto part = std::make_unique<Part>();
    part->op = proto::OP_PULL_SPARSE;
    part->table = table;
    part->out = out;
    part->expect_bytes = n * row_bytes;
    part->reply_type = reply_type;
    SetRowCodec(pull_codec, n * dim, &h);
    SendPart(ticket, 0, h, Buffer::Copy(keys, n * sizeof(uint64_t)), Buffer(), std::move(part));
    return ticket;
  }
  std::vector<int32_t> owner(n);
  std::vector<size_t> counts(num_servers, 0);
  ServersForKeys(table, keys, n, num_servers, owner.data());
  for (size_t i = 0; i < n; ++i) counts[owner[i]]++;
  std::vector<Buffer> kbuf(num_servers);
  std::vector<std::unique_ptr<Part>> parts(num_servers);
  std::vector<uint64_t*> kp(num_servers);
  for (int s = 0; s < num_servers; ++s) {
    if (counts[s] == 0) continue;
    kbuf[s] = Buffer::Allocate(counts[s] * sizeof(uint64_t));
    kp[s] = reinterpret_cast<uint64_t*>(kbuf[s].mutable_data());
    parts[s] = std::make_unique<Part>();
    parts[s]->op = proto::OP_PULL_SPARSE;
    parts[s]->table = table;
    parts[s]->out = out;
    parts[s]->positions.reserve(counts[s]);
    parts[s]->expect_bytes = counts[s] * row_bytes;
    parts[s]->reply_type = reply_type;
  }
  for (size_t i = 0; i < n; ++i) {
    int s = owner[i];
    *kp[s]++ = keys[i];
    parts[s]->positions.push_back(static_cast<uint32_t>(i));
  }
  for (int s = 0; s < num_servers; ++s) {
    if (!parts[s]) continue;
    SetRowCodec(pull_codec, counts[s] * dim, &h);
    SendPart(ticket, s, h, std::move(kbuf[s]), Buffer(), std::move(parts[s]));
  }
  return ticket;
}

Ticket Client::Push(uint32_t table, const uint64_t* keys, size_t n, const float* grads,
                    int64_t clock, uint64_t version) {
  Status bad = CheckTable(table, /*sparse=*/true);
  Ticket ticket = NewTicket(proto::OP_PUSH_SPARSE, table, bad);
  if (!bad.ok() || n == 0) return ticket;
  int num_servers = static_cast<int>(peers_.size());
  size_t dim = map_.tables(table).dim();
  const proto::Codec row_codec = sparse_codecs_[table];
  const codec::ValueType row_type = RowType(row_codec);
  const size_t row_bytes = dim * codec::RowValueBytes(row_type);
  proto::Header h;
  h.set_op(proto::OP_PUSH_SPARSE);
  h.set_table(table);
  h.set_clock(clock);
  h.set_version(version);
  if (num_servers == 1) {  // no partitioning: two bulk copies
    SetRowCodec(row_codec, n * dim, &h);
    auto part = std::make_unique<Part>();
    part->op = proto::OP_PUSH_SPARSE;
    part->table = table;
    Buffer values = Buffer::Allocate(n * row_bytes);
    codec::CastRowValues(grads, n * dim, row_type, values.mutable_data());
    SendPart(ticket, 0, h, Buffer::Copy(keys, n * sizeof(uint64_t)), std::move(values), std::move(part));
    return ticket;
  }
  std::vector<int32_t> owner(n);
  std::vector<size_t> counts(num_servers, 0);
  ServersForKeys(table, keys, n, num_servers, owner.data());
  for (size_t i = 0; i < n; ++i) counts[owner[i]]++;
  std::vector<Buffer> kbuf(num_servers), vbuf(num_servers);
  std::vector<uint64_t*> kp(num_servers);
  std::vector<uint8_t*> vp(num_servers);
  for (int s = 0; s < num_servers; ++s) {
    if (counts[s] == 0) continue;
    kbuf[s] = Buffer::Allocate(counts[s] * sizeof(uint64_t));
    vbuf[s] = Buffer::Allocate(counts[s] * row_bytes);
    kp[s] = reinterpret_cast<uint64_t*>(kbuf[s].mutable_data());
    vp[s] = vbuf[s].mutable_data();
  }
  for (size_t i = 0; i < n; ++i) {
    int s = owner[i];
    *kp[s]++ = keys[i];
    vp[s] += codec::CastRowValues(grads + i * dim, dim, row_type, vp[s]);
  }
  for (int s = 0; s < num_servers; ++s) {
    if (counts[s] == 0) continue;
    auto part = std::make_unique<Part>();
    part->op = proto::OP_PUSH_SPARSE;
    part->table = table;
    SetRowCodec(row_codec, counts[s] * dim, &h);
    SendPart(ticket, s, h, std::move(kbuf[s]), std::move(vbuf[s]), std::move(part));
  }
  return ticket;
}

Ticket Client::PushByServer(uint32_t table, const uint64_t* keys, size_t n, const float* grads, const int32_t* counts,
                            int64_t clock, uint64_t version) {
  Status bad = CheckTable(table, /*sparse=*/true);
  const int num_servers = static_cast<int>(peers_.size());
  if (bad.ok()) {
    uint64_t sum = 0;
    for (int s = 0; s < num_servers; ++s) {
      if (counts[s] < 0) {
        bad = InvalidArgument("push by server to table '" + map_.tables(table).name() + "': server " +
                              std::to_string(s) + " has a negative count " + std::to_string(counts[s]));
        break;
      }
      sum += static_cast<uint64_t>(counts[s]);
    }
    if (bad.ok() && sum != n) {
      bad = InvalidArgument("push by server to table '" + map_.tables(table).name() + "': the server counts sum to " +
                            std::to_string(sum) + ", not to the " + std::to_string(n) + " keys");
    }
  }
  Ticket ticket = NewTicket(proto::OP_PUSH_SPARSE, table, bad);
  if (!bad.ok() || n == 0) return ticket;
  const size_t dim = map_.tables(table).dim();
  const proto::Codec row_codec = sparse_codecs_[table];
  const codec::ValueType row_type = RowType(row_codec);
  proto::Header h;
  h.set_op(proto::OP_PUSH_SPARSE);
  h.set_table(table);
  h.set_clock(clock);
  h.set_version(version);
  size_t first = 0;
  for (int s = 0; s < num_servers; ++s) {
    const size_t count = static_cast<size_t>(counts[s]);
    if (count == 0) continue;
    auto part = std::make_unique<Part>();
    part->op = proto::OP_PUSH_SPARSE;
    part->table = table;
    SetRowCodec(row_codec, count * dim, &h);
    Buffer values = Buffer::Allocate(count * dim * codec::RowValueBytes(row_type));
    codec::CastRowValues(grads + first * dim, count * dim, row_type, values.mutable_data());
    SendPart(ticket, s, h, Buffer::Copy(keys + first, count * sizeof(uint64_t)), std::move(values),
             std::move(part));
    first += count;
  }
  return ticket;
}

Ticket Client::PullDense(uint32_t table, float* out, int64_t clock) {
  return SendDense(proto::OP_PULL_DENSE, table, nullptr, nullptr, out, clock, 0);
}

Ticket Client::PullDense(uint32_t table, float* out, int64_t clock, const std::vector<bool>& servers) {
  return SendDense(proto::OP_PULL_DENSE, table, nullptr, nullptr, out, clock, 0, &servers);
}

Ticket Client::PullDense(uint32_t table, Buffer* out, int64_t clock) {
  return SendDense(proto::OP_PULL_DENSE, table, nullptr, nullptr, nullptr, clock, 0, nullptr, out);
}

Ticket Client::PushDense(uint32_t table, const float* grads, int64_t clock, uint64_t version) {
  return SendDense(proto::OP_PUSH_DENSE, table, grads, nullptr, nullptr, clock, version);
}

Ticket Client::PushDense(uint32_t table, const float* grads, int64_t clock, uint64_t version,
                         const std::vector<bool>& servers) {
  return SendDense(proto::OP_PUSH_DENSE, table, grads, nullptr, nullptr, clock, version, &servers);
}

Ticket Client::PushDense(uint32_t table, const Buffer& grads, int64_t clock, uint64_t version) {
  return SendDense(proto::OP_PUSH_DENSE, table, nullptr, &grads, nullptr, clock, version);
}

Ticket Client::InitDense(uint32_t table, const float* values) {
  return SendDense(proto::OP_INIT_DENSE, table, values, nullptr, nullptr, 0, 0);
}

Ticket Client::SendDense(proto::Op op, uint32_t table, const float* in, const Buffer* in_buffer,
                         float* out, int64_t clock, uint64_t version, const std::vector<bool>* servers,
                         Buffer* out_buffer) {
  Status bad = CheckTable(table, /*sparse=*/false);
  if (bad.ok() && servers != nullptr && servers->size() != peers_.size()) {
    bad = InvalidArgument(std::string(op == proto::OP_PULL_DENSE ? "dense pull" : "dense push") + " to table '" +
                          map_.tables(table).name() + "': server mask has " +
                          std::to_string(servers->size()) + " entries for " + std::to_string(peers_.size()) +
                          " servers");
  }
  if (bad.ok() && in_buffer != nullptr &&
      in_buffer->size() != map_.tables(table).size() * sizeof(float)) {
    bad = InvalidArgument("dense push to table '" + map_.tables(table).name() + "': buffer has " +
                          std::to_string(in_buffer->size()) + " bytes, the table needs " +
                          std::to_string(map_.tables(table).size() * sizeof(float)));
  }
  Ticket ticket = NewTicket(op, table, bad);
  if (!bad.ok()) return ticket;
  const float* src = in_buffer ? in_buffer->as<float>() : in;
  const std::vector<DenseRoute>& routes = dense_routes_[table];
  // A pull into a Buffer: one server's reply that is the whole table in order is taken as it is;
  // anything else lands in a Buffer of the table's size, like a pull into a float array.
  Buffer* out_frame = nullptr;
  if (out_buffer != nullptr) {
    if (routes.size() == 1 && routes[0].contiguous && routes[0].floats == map_.tables(table).size()) {
      out_frame = out_buffer;
    } else {
      *out_buffer = Buffer::Allocate(map_.tables(table).size() * sizeof(float));
      out = reinterpret_cast<float*>(out_buffer->mutable_data());
    }
  }
  for (const DenseRoute& route : routes) {
    int s = route.server;
    // Masked out: a push skips the server; a pull sends it an empty pull that only carries the
    // clock (no keys, no values back), so the server still sees this worker's progress.
    const bool clock_only = servers != nullptr && !(*servers)[s];
    if (clock_only && op != proto::OP_PULL_DENSE) continue;
    auto part = std::make_unique<Part>();
    part->op = op;
    part->table = table;
    part->out = out;
    part->out_frame = out_frame;
    part->route = &route;
    part->clock_only = clock_only;
    uint64_t floats = clock_only ? 0 : route.floats;
    Buffer vbuf;
    if (op == proto::OP_PULL_DENSE) {
      part->expect_bytes = floats * sizeof(float);
    } else if (in_buffer != nullptr && route.contiguous) {
      vbuf = in_buffer->Slice(route.ranges[0].first * sizeof(float), floats * sizeof(float));
    } else {
      vbuf = Buffer::Allocate(floats * sizeof(float));
      uint8_t* p = vbuf.mutable_data();
      for (const auto& [first, len] : route.ranges) {
        std::memcpy(p, src + first, len * sizeof(float));
        p += len * sizeof(float);
      }
    }
    proto::Header h;
    h.set_op(op);
    h.set_table(table);
    h.set_clock(clock);
    h.set_version(version);
    if (op == proto::OP_PUSH_DENSE && table < dense_encoders_.size() && dense_encoders_[table]) {
      Buffer encoded;
      Status es = dense_encoders_[table](table, s, vbuf.as<float>(), floats, &h, &encoded);
      if (!es.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        FailTicketLocked(tickets_[ticket].get(), es.WithContext(Describe(op, table)));
        return ticket;
      }
      vbuf = std::move(encoded);
    }
    SendPart(ticket, s, h, clock_only ? Buffer() : route.keys, std::move(vbuf), std::move(part));
  }
  return ticket;
}

void Client::OnReply(Message&& msg) {
  auto header = ParseHeader(msg.header);
  std::unique_lock<std::mutex> lock(mu_);
  if (!header.ok()) {
    ++stats_.errors;  // cannot be matched to a request; the request will time out
    return;
  }
  auto it = pending_.find(header->request_id());
  if (it == pending_.end()) return;  // its ticket already finished (timeout or error)
  std::unique_ptr<Part> part = std::move(it->second);
  pending_.erase(it);
  --inflight_;
  auto tit = tickets_.find(part->ticket);
  TicketState* t = tit->second.get();
  --t->remaining;
  Status s = StatusFromHeader(*header);
  if (s.ok() && header->op() != proto::OP_REPLY) {
    s = Internal("unexpected reply op " + std::to_string(header->op()));
  }
  if (s.ok() && msg.values.size() != part->expect_bytes) {
    s = DataLoss("reply carries " + std::to_string(msg.values.size()) + " bytes, expected " +
                 std::to_string(part->expect_bytes));
  }
  if (!s.ok()) {
    ++stats_.errors;
    FailTicketLocked(t, s.WithContext(Describe(t->op, t->table) + " on server " +
                                      std::to_string(part->server)));
  } else if ((part->op == proto::OP_PULL_SPARSE || part->op == proto::OP_PULL_DENSE) &&
             !part->clock_only) {
    stats_.bytes_pulled += msg.values.size();
    part->reply = std::move(msg.values);  // a view of the received frame: no copy here
    t->arrived.push_back(std::move(part));
  }
  if (s.ok() && t->table < versions_.size()) {
    versions_[t->table] = std::max(versions_[t->table], header->version());
  }
  lock.unlock();  // wake the waiter without making it block on mu_ again
  cv_.notify_all();
}

Status Client::Wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return InvalidArgument("unknown or already waited ticket");
  TicketState* t = it->second.get();
  bool finished = cv_.wait_until(lock, t->deadline, [&] {
    return t->remaining == 0 || !t->status.ok() || stopped_;
  });
  if (!finished && t->status.ok()) {
    t->status = DeadlineExceeded(Describe(t->op, t->table) + ": no reply within " +
                                 std::to_string(options_.timeout_ms) + " ms");
  }
  if (stopped_ && t->status.ok() && t->remaining > 0) t->status = Aborted("client stopped");
  Status result = t->status;
  // Drop the ticket's outstanding parts so late replies never touch the caller's memory.
  for (auto p = pending_.begin(); t->remaining > 0 && p != pending_.end();) {
    if (p->second->ticket == ticket) {
      p = pending_.erase(p);
      --inflight_;
      --t->remaining;
    } else {
      ++p;
    }
  }
  std::vector<std::unique_ptr<Part>> arrived = std::move(t->arrived);
  tickets_.erase(it);
  lock.unlock();
  cv_.notify_all();
  // The rows go into the caller's memory here, on the waiting thread and outside mu_: the ticket
  // is gone from tickets_, so nothing else can reach these parts.
  if (result.ok()) {
    for (const std::unique_ptr<Part>& part : arrived) Deliver(part.get());
  }
  return result;
}

void Client::Deliver(Part* part) {
  const uint8_t* src = part->reply.data();
  if (part->op == proto::OP_PULL_SPARSE) {
    const size_t value_bytes = codec::RowValueBytes(part->reply_type);
    if (part->positions.empty()) {  // single server: rows are in key order
      codec::WidenRowValues(src, part->expect_bytes / value_bytes, part->reply_type, part->out);
      return;
    }
    const size_t row_bytes = part->expect_bytes / part->positions.size();
    const size_t dim = row_bytes / value_bytes;
    for (uint32_t pos : part->positions) {
      codec::WidenRowValues(src, dim, part->reply_type, part->out + size_t{pos} * dim);
      src += row_bytes;
    }
    return;
  }
  // Dense.
  if (part->out_frame != nullptr && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0) {
    *part->out_frame = std::move(part->reply);  // the whole table, in order: no copy
  } else if (part->out_frame != nullptr) {
    *part->out_frame = Buffer::Copy(src, part->expect_bytes);
  } else {
    for (const auto& [first, len] : part->route->ranges) {
      std::memcpy(part->out + first, src, len * sizeof(float));
      src += len * sizeof(float);
    }
  }
}

uint64_t Client::version(uint32_t table) const {
  std::lock_guard<std::mutex> lock(mu_);
  return table < versions_.size() ? versions_[table] : 0;
}

ClientStats Client::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace osprey::worker
