#include "server/migration/row_sender.h"

#include <chrono>
#include <thread>

#include "proto/wire.h"

namespace osprey::server::migration {
namespace {

using SteadyClock = std::chrono::steady_clock;

}  // namespace

RowSender::RowSender(std::unique_ptr<Transport> transport, int timeout_ms)
    : transport_(std::move(transport)), timeout_ms_(timeout_ms) {}

RowSender::~RowSender() {
  if (started_) transport_->Stop();
}

void RowSender::OnReply(Message&& msg) {
  auto h = ParseHeader(msg.header);
  if (!h.ok()) return;  // not ours to answer; the request then times out
  Status st = h->op() == proto::OP_ERROR
                  ? Status(static_cast<StatusCode>(h->status_code()), h->error())
                  : Status::OK();
  {
    MutexLock lock(&mu_);
    replies_[h->request_id()] = st;
  }
  cv_.SignalAll();
}

Status RowSender::Send(uint64_t id, const RowBatch& b) {
  proto::Header h;
  h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h.set_op(proto::OP_MIGRATE_ROWS);
  h.set_table(b.table);
  h.set_request_id(id);
  h.set_epoch(b.epoch);
  h.set_version(b.version);
  h.set_num_keys(b.keys.size());
  h.set_reowned_rows(b.reowned);
  h.set_value_bytes(b.records.size() * sizeof(float));
  Message m;
  m.peer = peers_.at(b.endpoint);
  m.header = SerializeHeader(h);
  m.keys = Buffer::Copy(b.keys.data(), b.keys.size() * sizeof(uint64_t));
  m.values = Buffer::Copy(b.records.data(), b.records.size() * sizeof(float));
  return transport_->Send(std::move(m));
}

Status RowSender::SendAll(std::vector<RowBatch> batches) {
  if (!started_) {
    transport_->SetHandler([this](Message&& m) { OnReply(std::move(m)); });
  }
  for (const RowBatch& b : batches) {
    if (peers_.count(b.endpoint) != 0) continue;
    OSPREY_ASSIGN_OR_RETURN(PeerId peer, transport_->Connect(b.endpoint));
    peers_[b.endpoint] = peer;
  }
  if (!started_) {
    OSPREY_RETURN_IF_ERROR(transport_->Start());
    started_ = true;
  }
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms_);
  std::map<uint64_t, size_t> pending;  // request id -> batch
  Status last_refusal;                 // the latest Unavailable, for the deadline's error
  uint64_t next_id = 1;
  for (size_t i = 0; i < batches.size(); ++i) {
    OSPREY_RETURN_IF_ERROR(Send(next_id, batches[i]));
    pending[next_id++] = i;
  }
  while (!pending.empty()) {
    std::map<uint64_t, Status> got;
    {
      MutexLock lock(&mu_);
      while (replies_.empty() && SteadyClock::now() < deadline) {
        cv_.WaitFor(&lock, std::chrono::milliseconds(5));
      }
      got.swap(replies_);
    }
    if (got.empty()) {
      if (!last_refusal.ok()) return last_refusal;  // still not at the epoch by the deadline
      return DeadlineExceeded("scale: " + std::to_string(pending.size()) +
                              " row transfers unanswered after " + std::to_string(timeout_ms_) +
                              " ms (first to " + batches[pending.begin()->second].endpoint + ")");
    }
    for (auto& [id, st] : got) {
      auto it = pending.find(id);
      if (it == pending.end()) continue;
      const size_t index = it->second;
      const RowBatch& b = batches[index];
      pending.erase(it);
      if (st.ok()) continue;
      Status why = st.WithContext("scale: moving " + std::to_string(b.keys.size()) +
                                  " records of table " + std::to_string(b.table) + " to " + b.endpoint);
      if (st.code() != StatusCode::kUnavailable || SteadyClock::now() >= deadline) return why;
      last_refusal = why;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the receiver is resharding
      OSPREY_RETURN_IF_ERROR(Send(next_id, b));
      pending[next_id++] = index;
    }
  }
  return Status::OK();
}

}  // namespace osprey::server::migration
