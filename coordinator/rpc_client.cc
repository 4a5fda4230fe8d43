#include "coordinator/rpc_client.h"

#include <chrono>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "coordinator/control_message.h"
#include "proto/wire.h"

namespace osprey::coordinator {

RpcClient::RpcClient(std::unique_ptr<Transport> transport, std::string endpoint)
    : transport_(std::move(transport)), endpoint_(std::move(endpoint)) {}

RpcClient::~RpcClient() { Stop(); }

StatusOr<std::unique_ptr<RpcClient>> RpcClient::Create(std::unique_ptr<Transport> transport,
                                                       const std::string& endpoint) {
  if (transport == nullptr) return InvalidArgument("RpcClient: no transport");
  std::unique_ptr<RpcClient> client(new RpcClient(std::move(transport), endpoint));
  RpcClient* self = client.get();
  client->transport_->SetHandler([self](Message&& msg) { self->OnMessage(std::move(msg)); });
  StatusOr<PeerId> peer = client->transport_->Connect(endpoint);
  if (!peer.ok()) return peer.status().WithContext("connecting to the coordinator at " + endpoint);
  client->peer_ = *peer;
  OSPREY_RETURN_IF_ERROR(client->transport_->Start());
  return client;
}

void RpcClient::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  cv_.SignalAll();
  transport_->Stop();
}

Status RpcClient::Call(proto::Op op, const google::protobuf::MessageLite* request,
                       google::protobuf::MessageLite* reply, int timeout_ms) {
  uint64_t id;
  {
    MutexLock lock(&mu_);
    id = next_id_++;
  }
  return Roundtrip(op, MakeRequest(peer_, op, id, request), id, reply, timeout_ms);
}

Status RpcClient::CallRaw(proto::Op op, std::string payload, google::protobuf::MessageLite* reply,
                          int timeout_ms, int64_t clock) {
  uint64_t id;
  {
    MutexLock lock(&mu_);
    id = next_id_++;
  }
  Message msg = MakeRequest(peer_, op, id, nullptr);
  if (clock != 0) {
    proto::Header h;
    h.ParseFromArray(msg.header.data(), static_cast<int>(msg.header.size()));
    h.set_clock(clock);
    msg.header = SerializeHeader(h);
  }
  msg.values = Buffer::Copy(payload.data(), payload.size());
  return Roundtrip(op, std::move(msg), id, reply, timeout_ms);
}

Status RpcClient::Roundtrip(proto::Op op, Message msg, uint64_t id,
                            google::protobuf::MessageLite* reply, int timeout_ms) {
  const std::string what = OpName(op) + " to " + endpoint_;
  auto slot = std::make_shared<Slot>();
  slot->op = op;
  if (op != proto::OP_HEARTBEAT && op != proto::OP_REGISTER) slot->request = msg;  // shares buffers
  {
    MutexLock lock(&mu_);
    if (stopped_) return Unavailable(what + ": the client is stopped");
    slot->generation = generation_;
    pending_[id] = slot;
  }
  Status sent = transport_->Send(std::move(msg));
  MutexLock lock(&mu_);
  if (!sent.ok()) {
    pending_.erase(id);
    return Unavailable(what + ": " + sent.ToString());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool woke = cv_.WaitUntil(&lock, deadline, [&]() REQUIRES(mu_) { return slot->done || stopped_; });
  pending_.erase(id);
  if (!slot->done) {
    if (!woke) {
      return DeadlineExceeded(what + ": no reply within " + std::to_string(timeout_ms) + " ms");
    }
    return Unavailable(what + ": the client was stopped");
  }
  lock.Unlock();
  if (!slot->status.ok()) return slot->status;
  if (reply != nullptr &&
      !reply->ParseFromArray(slot->payload.data(), static_cast<int>(slot->payload.size()))) {
    return InvalidArgument(what + ": the reply (" + std::to_string(slot->payload.size()) +
                           " bytes) is not a valid " + reply->GetTypeName());
  }
  return Status::OK();
}

void RpcClient::OnMessage(Message&& msg) {
  proto::Header header;
  Status st = ParseRequestHeader(msg, &header).WithContext("reply from " + endpoint_);
  if (header.request_id() == 0) {  // unparsable, or no request to attribute it to
    stray_replies_.fetch_add(1);
    OSPREY_LOG_WARN("dropping a reply: {}", st.ok() ? "request id 0" : st.message());
    return;
  }
  if (st.ok()) {
    if (header.op() == proto::OP_ERROR) {
      st = StatusFromHeader(header);
    } else if (header.op() != proto::OP_REPLY) {
      st = InvalidArgument("reply from " + endpoint_ + " has op " + OpName(header.op()));
    }
  }
  MutexLock lock(&mu_);
  auto it = pending_.find(header.request_id());
  if (it == pending_.end()) {
    stray_replies_.fetch_add(1);  // its call already gave up
    return;
  }
  if (st.code() == StatusCode::kUnavailable && hold_unavailable_.load() &&
      it->second->op != proto::OP_HEARTBEAT && it->second->op != proto::OP_REGISTER) {
    // A restarted coordinator that has not seen this node's re-registration yet: the call is
    // re-sent after it (ResendPending).
    OSPREY_LOG_DEBUG("{} held for a re-send: {}", OpName(it->second->op), st.message());
    return;
  }
  it->second->done = true;
  it->second->status = st;
  it->second->payload = msg.values;
  cv_.SignalAll();
}

uint64_t RpcClient::NextGeneration() {
  MutexLock lock(&mu_);
  return ++generation_;
}

size_t RpcClient::ResendPending(uint64_t generation) {
  std::vector<Message> resend;
  {
    MutexLock lock(&mu_);
    if (stopped_) return 0;
    for (auto& [id, slot] : pending_) {
      if (slot->done || slot->generation >= generation || slot->request.header.empty()) continue;
      slot->generation = generation;
      resend.push_back(slot->request);
    }
  }
  for (Message& m : resend) {
    Status st = transport_->Send(std::move(m));
    if (!st.ok()) OSPREY_LOG_WARN("re-sending a request to {}: {}", endpoint_, st.ToString());
  }
  return resend.size();
}

void RpcClient::FailPending(const Status& why) {
  MutexLock lock(&mu_);
  for (auto& [id, slot] : pending_) {
    if (slot->done) continue;
    slot->done = true;
    slot->status = why;
  }
  cv_.SignalAll();
}

}  // namespace osprey::coordinator
