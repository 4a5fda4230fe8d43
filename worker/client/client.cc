#include "worker/client/client.h"

#include "common/codec/encoded.h"
#include "worker/client/push_parts.h"

namespace osprey::worker {

Client::Client(const ClientOptions& options, std::unique_ptr<Transport> transport,
               const proto::ShardMap& shard_map)
    : options_(options),
      transport_(std::move(transport)),
      map_(shard_map),
      router_(map_.server_endpoints_size()),
      dense_routes_(RouteDenseTables(map_)),
      requests_(options.timeout_ms, options.max_inflight, map_.tables_size(),
                [this](proto::Op op, uint32_t table) { return Describe(op, table); },
                options.receive_in_wait ? RequestTable::ReceiveHere([this](const std::function<bool()>& done,
                                                                          std::chrono::steady_clock::time_point until) {
                  return transport_->ReceiveUntil(done, until);
                })
                                        : nullptr) {
  epoch_.store(map_.epoch());
  MutexLock lock(&codec_mu_);
  encoders_.resize(map_.tables_size());
  pull_codecs_.assign(map_.tables_size(), proto::CODEC_NONE);
}

Client::~Client() { Stop(); }

Status Client::Start() {
  transport_->SetHandler([this](Message&& m) { OnReply(std::move(m)); });
  {
    MutexLock lock(&route_mu_);
    for (int i = 0; i < map_.server_endpoints_size(); ++i) {
      auto peer = transport_->Connect(map_.server_endpoints(i));
      if (!peer.ok()) return peer.status().WithContext("connecting to server " + std::to_string(i));
      peers_.push_back(*peer);
      endpoints_.push_back(map_.server_endpoints(i));
    }
    incarnations_.assign(peers_.size(), 0);
  }
  return transport_->Start();
}

void Client::Stop() {
  if (requests_.Stop()) transport_->Stop();
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

Status Client::SetEncoder(uint32_t table, std::unique_ptr<PushEncoder> encoder) {
  if (table >= static_cast<uint32_t>(map_.tables_size())) {
    return InvalidArgument("table id " + std::to_string(table) + " does not exist");
  }
  if (encoder != nullptr) OSPREY_RETURN_IF_ERROR(encoder->CheckTable(map_.tables(table)));
  std::shared_ptr<PushEncoder> shared = std::move(encoder);
  MutexLock lock(&codec_mu_);
  encoders_[table].swap(shared);
  return Status::OK();  // the old encoder goes when its last push in flight lets go of it
}

Status Client::SetSparsePullCodec(uint32_t table, proto::Codec codec) {
  OSPREY_RETURN_IF_ERROR(CheckTable(table, /*sparse=*/true));
  if (codec != proto::CODEC_NONE && codec != proto::CODEC_FP16 && codec != proto::CODEC_BF16) {
    return InvalidArgument("sparse table '" + map_.tables(table).name() +
                           "': rows can be pulled as fp32, fp16 or bf16, not with codec " +
                           codec::CodecIdName(static_cast<codec::CodecId>(codec)));
  }
  MutexLock lock(&codec_mu_);
  pull_codecs_[table] = codec;
  return Status::OK();
}

std::shared_ptr<PushEncoder> Client::EncoderOf(uint32_t table) const {
  MutexLock lock(&codec_mu_);
  return encoders_[table];
}

void Client::Send(Ticket ticket, int server, proto::Header header, Buffer keys, Buffer values,
                  size_t expect_bytes, std::unique_ptr<ReplySink> sink) {
  const bool pull = header.op() == proto::OP_PULL_SPARSE || header.op() == proto::OP_PULL_DENSE;
  if (BelowFloor(server, header)) return;  // that server took this step's push already
  const uint64_t id = requests_.Admit(ticket, server, expect_bytes, std::move(sink),
                                      pull ? 0 : keys.size() + values.size());
  if (id == 0) return;  // the ticket failed (recorded there): nothing is sent
  header.set_request_id(id);
  header.set_worker_rank(options_.worker_rank);
  header.set_epoch(epoch_.load(std::memory_order_acquire));
  header.set_worker_incarnation(options_.incarnation);
  header.set_rollback_generation(rollback_generation_.load(std::memory_order_acquire));
  header.set_num_keys(keys.size() / sizeof(uint64_t));
  header.set_value_bytes(values.size());
  Message m;
  m.peer = PeerOf(server);
  m.header = SerializeHeader(header);
  m.keys = std::move(keys);
  m.values = std::move(values);
  requests_.Keep(id, m.header, m.keys, m.values);  // for a re-send to a replacement
  Status s = transport_->Send(std::move(m));
  if (!s.ok()) requests_.SendFailed(id, s);
}

bool Client::SendPushParts(Ticket ticket, int server, const proto::Header& header, const Buffer& keys,
                           const PushValues& v, const std::vector<size_t>& starts,
                           const std::vector<uint64_t>* key_floats, size_t floats_per_key,
                           PushEncoder* encoder) {
  if (starts.size() < 2 || !v.AllFinite()) return false;
  const size_t n = keys.size() / sizeof(uint64_t);
  size_t first_float = 0;
  for (size_t p = 0; p < starts.size(); ++p) {
    const size_t begin = starts[p], end = p + 1 < starts.size() ? starts[p + 1] : n;
    size_t floats = 0;
    if (key_floats != nullptr) {
      for (size_t i = begin; i < end; ++i) floats += (*key_floats)[i];
    } else {
      floats = (end - begin) * floats_per_key;
    }
    proto::Header part = header;
    part.set_push_part(static_cast<uint32_t>(p + 1));
    part.set_push_parts(static_cast<uint32_t>(starts.size()));
    const PushValues pv = v.Part(begin, end, first_float, floats);
    first_float += floats;
    Buffer values;
    if (encoder == nullptr) {
      values = pv.Fp32Frame();
    } else if (Status s = encoder->Encode(pv, &part, &values); !s.ok()) {
      requests_.Fail(ticket, s);  // EncodesPartsAlone: only a broken encoder gets here
      return true;
    }
    Send(ticket, server, std::move(part), keys.Slice(begin * sizeof(uint64_t), (end - begin) * sizeof(uint64_t)),
         std::move(values), 0, nullptr);
  }
  return true;
}

void Client::OnReply(Message&& msg) {
  auto header = ParseHeader(msg.header);
  if (!header.ok()) {
    requests_.OnBadReply();
    return;
  }
  requests_.OnReply(*header, std::move(msg.values));
}

Status Client::Wait(Ticket ticket) { return requests_.Wait(ticket); }

}  // namespace osprey::worker
