#include "common/rdma/rdma_transport.h"

#include <cstdlib>
#include <random>

#include "common/logging.h"
#include "common/rdma/rdma_wire.h"

namespace osprey::rdma {

namespace {

using Clock = std::chrono::steady_clock;

// wr_id: bits 28..31 the kind, bits 0..27 an index (the staging slot for data writes).
enum WrKind : uint64_t { kWrData = 1, kWrControl = 2, kWrRead = 3, kWrRecv = 4 };
uint64_t WrId(WrKind k, uint32_t index) { return (static_cast<uint64_t>(k) << 28) | index; }

uint64_t NewInstanceId() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<uint64_t>(Clock::now().time_since_epoch().count());
}

}  // namespace

StatusOr<std::string> ParseRdmaEndpoint(const std::string& endpoint) {
  const std::string prefix = "rdma://";
  if (endpoint.rfind(prefix, 0) != 0) {
    return InvalidArgument("rdma: endpoint '" + endpoint + "' is not rdma://host:port");
  }
  std::string hp = endpoint.substr(prefix.size());
  size_t colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == hp.size() ||
      hp.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return InvalidArgument("rdma: endpoint '" + endpoint + "' is not rdma://host:port");
  }
  return hp;
}

Status CheckRdmaOptions(const RdmaOptions& o) {
  if (o.ring_slots < 1 || o.ring_slots > wire::kMaxSlots) {
    return InvalidArgument("rdma.ring_slots must be in [1, 2048], got " +
                           std::to_string(o.ring_slots));
  }
  if (o.slot_bytes < sizeof(wire::SlotHeader) + 64 || o.slot_bytes >= wire::kMaxSlotBytes) {
    return InvalidArgument("rdma.slot_bytes must be in [" +
                           std::to_string(sizeof(wire::SlotHeader) + 64) + ", 1048575], got " +
                           std::to_string(o.slot_bytes));
  }
  if (o.rendezvous_threshold < 1) return InvalidArgument("rdma.rendezvous_threshold must be >= 1");
  if (o.mr_cache_entries < 1) return InvalidArgument("rdma: mr_cache_entries must be >= 1");
  return Status::OK();
}

RdmaTransport::RdmaTransport(const RdmaOptions& options, std::shared_ptr<Verbs> verbs)
    : options_(options),
      verbs_(std::move(verbs)),
      mr_cache_(std::make_shared<MrCache>(verbs_, options.mr_cache_entries)),
      instance_(NewInstanceId()) {}

RdmaTransport::~RdmaTransport() { Stop(); }

StatusOr<std::string> RdmaTransport::Listen(const std::string& endpoint) {
  OSPREY_ASSIGN_OR_RETURN(std::string hp, ParseRdmaEndpoint(endpoint));
  {
    MutexLock lock(&mu_);
    if (started_ || stopped_) return FailedPrecondition("rdma: Listen after Start");
    if (listening_) return FailedPrecondition("rdma: already listening");
  }
  auto bound = verbs_->Listen(
      hp, [this](QpId qp, const PrivateData& remote) { return Accept(qp, remote); });
  if (!bound.ok()) return bound.status().WithContext("rdma: listen on " + endpoint);
  MutexLock lock(&mu_);
  listening_ = true;
  return "rdma://" + *bound;
}

StatusOr<PeerId> RdmaTransport::Connect(const std::string& endpoint) {
  OSPREY_ASSIGN_OR_RETURN(std::string hp, ParseRdmaEndpoint(endpoint));
  MutexLock lock(&mu_);
  if (stopped_) return FailedPrecondition("rdma: transport stopped");
  auto p = std::make_unique<Peer>();
  p->id = static_cast<PeerId>(peers_.size());
  p->dialed = true;
  p->host_port = hp;
  peers_.push_back(std::move(p));
  verbs_->Wake();  // the poller connects it
  return peers_.back()->id;
}

void RdmaTransport::SetHandler(Handler handler) { handler_ = std::move(handler); }

Status RdmaTransport::Start() {
  MutexLock lock(&mu_);
  if (started_ || stopped_) return FailedPrecondition("rdma: Start called twice");
  if (!handler_) return FailedPrecondition("rdma: SetHandler before Start");
  started_ = true;
  poller_ = std::thread([this] { Run(); });
  return Status::OK();
}

void RdmaTransport::Stop() {
  stop_requested_ = true;
  verbs_->Wake();
  if (poller_.joinable()) {
    if (std::this_thread::get_id() == poller_id_.load()) return;  // from the handler
    poller_.join();
  }
  verbs_->StopListening();
  MutexLock lock(&mu_);
  if (stopped_) return;
  stopped_ = true;
  for (auto& p : peers_) {
    if (p->state != State::kBroken) TearDown(p.get(), FailedPrecondition("rdma: stopped"));
  }
}

Status RdmaTransport::Send(Message msg) {
  MutexLock lock(&mu_);
  if (!started_ || stopped_ || stop_requested_) {
    return FailedPrecondition("rdma: Send on a transport that is not running");
  }
  if (msg.peer < 0 || static_cast<size_t>(msg.peer) >= peers_.size()) {
    return NotFound("rdma: unknown peer " + std::to_string(msg.peer));
  }
  for (const Buffer* f : {&msg.header, &msg.keys, &msg.values}) {
    if (f->size() > 0xffffffffu) {
      send_failures_++;
      return InvalidArgument("rdma: a frame of " + std::to_string(f->size()) +
                             " B is over the transport's 4 GiB - 1 limit");
    }
  }
  Peer* p = peers_[msg.peer].get();
  if (p->state == State::kBroken || !cq_error_.ok()) {
    send_failures_++;
    Status why = cq_error_.ok() ? p->error : cq_error_;
    return Unavailable("rdma: peer " + std::to_string(p->id) + " is not connected: " +
                       why.ToString());
  }
  if (options_.sndhwm > 0 && p->queued.size() >= static_cast<size_t>(options_.sndhwm)) {
    send_failures_++;
    return ResourceExhausted("rdma: peer " + std::to_string(p->id) + " has " +
                             std::to_string(p->queued.size()) + " queued messages (sndhwm)");
  }
  messages_sent_++;
  bytes_sent_ += msg.bytes();
  p->queued.push_back(std::move(msg));
  Pump(p);
  return Status::OK();
}

TransportStats RdmaTransport::stats() const {
  TransportStats s;
  s.messages_sent = messages_sent_;
  s.messages_received = messages_received_;
  s.bytes_sent = bytes_sent_;
  s.bytes_received = bytes_received_;
  s.malformed_received = malformed_;
  s.send_failures = send_failures_;
  return s;
}

Status RdmaTransport::PeerStatus(PeerId peer) const {
  MutexLock lock(&mu_);
  if (peer < 0 || static_cast<size_t>(peer) >= peers_.size()) {
    return NotFound("rdma: unknown peer " + std::to_string(peer));
  }
  if (!cq_error_.ok()) return cq_error_;
  const Peer& p = *peers_[peer];
  return p.state == State::kBroken ? p.error : Status::OK();
}

RdmaStats RdmaTransport::rdma_stats() const {
  MutexLock lock(&mu_);
  return rstats_;
}

void RdmaTransport::Run() {
  poller_id_ = std::this_thread::get_id();
  auto last = Clock::now();
  std::vector<Message> deliver;
  while (!stop_requested_) {
    Connections();
    deliver.clear();
    bool any = PollOnce(&deliver);
    for (Message& m : deliver) {
      if (stop_requested_) break;
      messages_received_++;
      bytes_received_ += m.bytes();
      handler_(std::move(m));
    }
    if (any) {
      last = Clock::now();
    } else if (Clock::now() - last > std::chrono::microseconds(options_.busy_poll_us)) {
      verbs_->WaitCqEvent(10);
    } else {
      std::this_thread::yield();
    }
  }
}

bool RdmaTransport::PollOnce(std::vector<Message>* deliver) {
  std::vector<WorkCompletion> wcs;
  StatusOr<int> n = verbs_->PollCq(&wcs, 64);
  MutexLock lock(&mu_);
  if (!n.ok()) {
    if (cq_error_.ok()) {
      cq_error_ = Unavailable("rdma: the completion queue failed: " + n.status().message());
      OSPREY_LOG_ERROR("{}", cq_error_.ToString());
      for (auto& p : peers_) {
        if (p->state != State::kBroken) TearDown(p.get(), cq_error_);
      }
    }
    lock.Unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // nothing more can arrive
    return false;
  }
  for (const WorkCompletion& wc : wcs) HandleCompletion(wc, deliver);
  return *n > 0;
}

void RdmaTransport::HandleCompletion(const WorkCompletion& wc, std::vector<Message>* deliver) {
  auto it = by_qp_.find(wc.qp);
  if (it == by_qp_.end()) return;  // a torn-down connection's flushed work
  Peer* p = peers_[it->second].get();
  if (!wc.ok) {
    std::string where = p->dialed ? " (" + p->host_port + ")" : "";
    TearDown(p, Unavailable("rdma: peer " + std::to_string(p->id) + where + ": " + wc.error));
    return;
  }
  const uint32_t index = wc.wr_id & ((1u << 28) - 1);
  switch (wc.wr_id >> 28) {
    case kWrData:
      if (index < p->staging_busy.size()) p->staging_busy[index] = false;
      Pump(p);
      return;
    case kWrRead:
      for (Inbound& in : p->inbound) {
        if (in.reads_pending == 0) continue;
        if (--in.reads_pending == 0) {
          for (const MemoryRegion& mr : in.mrs) mr_cache_->Release(mr);
          in.mrs.clear();
          Control(p, wire::ControlImm(wire::kReadDone, in.rendezvous_id));
        }
        break;  // reads complete in post order: this was the oldest one's
      }
      Deliverable(p, deliver);
      return;
    case kWrRecv: {
      Status s = verbs_->PostRecv(p->qp, wc.wr_id);
      if (!s.ok()) return TearDown(p, s.WithContext("rdma: re-posting a receive"));
      HandleRecv(p, wc);
      Deliverable(p, deliver);
      return;
    }
    default:
      return;  // control writes: nothing to do
  }
}

void RdmaTransport::Deliverable(Peer* p, std::vector<Message>* deliver) {
  while (!p->inbound.empty() && p->inbound.front().reads_pending == 0) {
    deliver->push_back(std::move(p->inbound.front().msg));
    p->inbound.pop_front();
  }
}

void RdmaTransport::Control(Peer* p, uint32_t imm) {
  if (p->state != State::kConnected) return;
  Status s = verbs_->PostWriteWithImm(p->qp, WrId(kWrControl, 0), nullptr, 0, 0, 0,
                                      p->remote_rkey, imm, true);
  if (!s.ok()) return TearDown(p, s.WithContext("rdma: posting a control write"));
  rstats_.control_writes++;
}

void RdmaTransport::TearDown(Peer* p, Status why) {
  rstats_.teardowns++;
  if (p->state != State::kBroken && !stopped_) {
    OSPREY_LOG_WARN("rdma: tearing down peer {}: {}", p->id, why.ToString());
  }
  p->state = State::kBroken;
  p->error = std::move(why);
  if (p->qp != 0) {
    by_qp_.erase(p->qp);
    verbs_->DestroyQp(p->qp);
    p->qp = 0;
  }
  for (auto& [id, o] : p->out) {
    for (const MemoryRegion& mr : o.mrs) mr_cache_->Release(mr);
  }
  p->out.clear();
  for (Inbound& in : p->inbound) {
    for (const MemoryRegion& mr : in.mrs) mr_cache_->Release(mr);
  }
  p->inbound.clear();
  p->queued.clear();
  for (Ring* r : {&p->ring, &p->staging}) {
    if (r->mem) (void)verbs_->DeregisterMemory(r->mr);
    *r = Ring();
  }
  p->retry_at = Clock::now() + std::chrono::milliseconds(options_.reconnect_interval_ms);
}

}  // namespace osprey::rdma
