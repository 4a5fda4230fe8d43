#include "common/rdma/loopback_verbs_for_testing.h"

#include <cstring>
#include <vector>

namespace osprey::rdma {

using Clock = std::chrono::steady_clock;

std::shared_ptr<LoopbackVerbsForTesting> LoopbackFabricForTesting::NewVerbs() {
  return std::make_shared<LoopbackVerbsForTesting>(shared_from_this());
}

uint64_t LoopbackFabricForTesting::writes() const {
  MutexLock lock(&mu_);
  return writes_;
}
uint64_t LoopbackFabricForTesting::reads() const {
  MutexLock lock(&mu_);
  return reads_;
}
uint64_t LoopbackFabricForTesting::registrations() const {
  MutexLock lock(&mu_);
  return registrations_;
}

std::string LoopbackFabricForTesting::CheckRange(uint32_t key, const LoopbackVerbsForTesting* owner,
                                                 const void* p, size_t len) const {
  auto it = regions_.find(key);
  if (it == regions_.end() || it->second.owner != owner) {
    return "key " + std::to_string(key) + " names no registered region";
  }
  const uint8_t* b = static_cast<const uint8_t*>(p);
  const Region& r = it->second;
  if (b < r.addr || b + len > r.addr + r.length) {
    return "range of " + std::to_string(len) + " bytes lies outside the region of key " +
           std::to_string(key) + " (" + std::to_string(r.length) + " bytes)";
  }
  return "";
}

void LoopbackFabricForTesting::Complete(LoopbackVerbsForTesting* v, WorkCompletion wc) {
  if (!v->cq_error_.empty()) return;
  if (v->cq_.size() >= v->cq_capacity_) {
    v->cq_error_ = "completion queue overrun (capacity " + std::to_string(v->cq_capacity_) + ")";
    v->cq_cv_.SignalAll();
    return;
  }
  v->cq_.push_back({std::move(wc), Clock::now() + v->delay_});
  v->cq_cv_.SignalAll();
}

void LoopbackFabricForTesting::Break(QpId id, const std::string& why) {
  for (QpId q : {id, qps_.count(id) ? qps_[id].peer : 0}) {
    auto it = qps_.find(q);
    if (it == qps_.end() || it->second.error) continue;
    it->second.error = true;
    while (!it->second.recvs.empty()) {
      WorkCompletion wc;
      wc.wr_id = it->second.recvs.front();
      it->second.recvs.pop_front();
      wc.qp = q;
      wc.opcode = WcOpcode::kRecvWithImm;
      wc.ok = false;
      wc.error = "receive flushed: " + why;
      Complete(it->second.owner, std::move(wc));
    }
  }
}

LoopbackVerbsForTesting::LoopbackVerbsForTesting(std::shared_ptr<Fabric> fabric)
    : fabric_(std::move(fabric)) {}

LoopbackVerbsForTesting::~LoopbackVerbsForTesting() {
  StopListening();
  MutexLock lock(&fabric_->mu_);
  std::vector<QpId> mine;
  for (auto& [id, qp] : fabric_->qps_) {
    if (qp.owner == this) mine.push_back(id);
  }
  for (QpId id : mine) {
    fabric_->Break(id, "the peer's device context was destroyed");
    QpId peer = fabric_->qps_[id].peer;
    if (peer != 0 && fabric_->qps_.count(peer)) fabric_->qps_[peer].peer = 0;
    fabric_->qps_.erase(id);
  }
  for (auto it = fabric_->regions_.begin(); it != fabric_->regions_.end();) {
    it = it->second.owner == this ? fabric_->regions_.erase(it) : std::next(it);
  }
}

void LoopbackVerbsForTesting::FailNextWrites(int n) {
  MutexLock lock(&fabric_->mu_);
  fail_writes_ = n;
}
void LoopbackVerbsForTesting::DelayCompletions(std::chrono::milliseconds d) {
  MutexLock lock(&fabric_->mu_);
  delay_ = d;
}
void LoopbackVerbsForTesting::DropConnections() {
  MutexLock lock(&fabric_->mu_);
  for (auto& [id, qp] : fabric_->qps_) {
    if (qp.owner == this && qp.peer != 0) fabric_->Break(id, "connection dropped (injected)");
  }
}
void LoopbackVerbsForTesting::SetCqCapacity(size_t n) {
  MutexLock lock(&fabric_->mu_);
  cq_capacity_ = n;
}

StatusOr<StackInfo> LoopbackVerbsForTesting::Query() {
  StackInfo info;
  DeviceInfo d;
  d.name = "loopback0 (test double)";
  PortInfo p;
  p.state = "active";
  p.link_layer = "loopback";
  p.active_mtu = 4096;
  d.ports.push_back(p);
  info.devices.push_back(d);
  return info;
}

StatusOr<MemoryRegion> LoopbackVerbsForTesting::RegisterMemory(const void* addr, size_t length) {
  if (addr == nullptr || length == 0) {
    return InvalidArgument("rdma: cannot register an empty memory region");
  }
  MutexLock lock(&fabric_->mu_);
  MemoryRegion mr;
  mr.addr = addr;
  mr.length = length;
  mr.lkey = mr.rkey = fabric_->next_key_++;
  mr.handle = mr.lkey;
  fabric_->regions_[mr.rkey] = {this, static_cast<const uint8_t*>(addr), length};
  fabric_->registrations_++;
  return mr;
}

Status LoopbackVerbsForTesting::DeregisterMemory(const MemoryRegion& mr) {
  MutexLock lock(&fabric_->mu_);
  auto it = fabric_->regions_.find(mr.rkey);
  if (it == fabric_->regions_.end() || it->second.owner != this) {
    return NotFound("rdma: no registered region with key " + std::to_string(mr.rkey));
  }
  fabric_->regions_.erase(it);
  return Status::OK();
}

StatusOr<std::string> LoopbackVerbsForTesting::Listen(const std::string& host_port,
                                                      AcceptHandler on_accept) {
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("rdma: endpoint '" + host_port + "' is not host:port");
  }
  std::string bound = host_port;
  MutexLock lock(&fabric_->mu_);
  if (!listening_.empty()) return FailedPrecondition("rdma: already listening on " + listening_);
  if (host_port.substr(colon + 1) == "0") {
    bound = host_port.substr(0, colon + 1) + std::to_string(fabric_->next_port_++);
  }
  if (fabric_->listeners_.count(bound)) return Unavailable("rdma: " + bound + " is in use");
  fabric_->listeners_[bound] = this;
  listening_ = bound;
  on_accept_ = std::move(on_accept);
  return bound;
}

void LoopbackVerbsForTesting::StopListening() {
  MutexLock lock(&fabric_->mu_);
  if (listening_.empty()) return;
  fabric_->listeners_.erase(listening_);
  listening_.clear();
  on_accept_ = nullptr;
}

StatusOr<QpId> LoopbackVerbsForTesting::CreateQp() {
  MutexLock lock(&fabric_->mu_);
  QpId id = fabric_->next_qp_++;
  fabric_->qps_[id].owner = this;
  return id;
}

StatusOr<PrivateData> LoopbackVerbsForTesting::Connect(QpId qp, const std::string& host_port,
                                                       const PrivateData& mine) {
  if (mine.size() > kMaxPrivateData) return InvalidArgument("rdma: private data over 56 bytes");
  AcceptHandler accept;
  LoopbackVerbsForTesting* listener = nullptr;
  QpId remote = 0;
  {
    MutexLock lock(&fabric_->mu_);
    auto l = fabric_->listeners_.find(host_port);
    if (l == fabric_->listeners_.end()) {
      return Unavailable("rdma: nothing listens on " + host_port + " (connection refused)");
    }
    listener = l->second;
    accept = listener->on_accept_;
    remote = fabric_->next_qp_++;
    fabric_->qps_[remote].owner = listener;
  }
  // The accept handler registers memory and posts receives: it runs without the wire's lock.
  StatusOr<PrivateData> theirs = accept(remote, mine);
  MutexLock lock(&fabric_->mu_);
  if (!theirs.ok() || !fabric_->qps_.count(qp)) {
    fabric_->qps_.erase(remote);
    if (!theirs.ok()) return theirs.status().WithContext("rdma: " + host_port + " rejected");
    return NotFound("rdma: no QP " + std::to_string(qp));
  }
  fabric_->qps_[qp].peer = remote;
  fabric_->qps_[remote].peer = qp;
  return theirs;
}

void LoopbackVerbsForTesting::DestroyQp(QpId qp) {
  MutexLock lock(&fabric_->mu_);
  auto it = fabric_->qps_.find(qp);
  if (it == fabric_->qps_.end() || it->second.owner != this) return;
  fabric_->Break(qp, "the peer disconnected");
  QpId peer = it->second.peer;
  if (peer != 0 && fabric_->qps_.count(peer)) fabric_->qps_[peer].peer = 0;
  fabric_->qps_.erase(qp);
}

Status LoopbackVerbsForTesting::PostWriteWithImm(QpId qp, uint64_t wr_id, const void* local,
                                                 uint32_t lkey, uint32_t length,
                                                 uint64_t remote_addr, uint32_t rkey,
                                                 uint32_t imm, bool /*inline_data*/) {
  MutexLock lock(&fabric_->mu_);
  auto it = fabric_->qps_.find(qp);
  if (it == fabric_->qps_.end() || it->second.owner != this) {
    return NotFound("rdma: no QP " + std::to_string(qp));
  }
  WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.qp = qp;
  wc.opcode = WcOpcode::kWrite;
  std::string err;
  auto peer = fabric_->qps_.find(it->second.peer);
  if (it->second.error || peer == fabric_->qps_.end()) {
    err = "work request flushed: the QP is in the error state";
  } else if (fail_writes_ > 0) {
    fail_writes_--;
    err = "injected completion error";
  } else if (length > 0 && !(err = fabric_->CheckRange(lkey, this, local, length)).empty()) {
    err = "local protection error: " + err;
  } else if (length > 0 &&
             !(err = fabric_->CheckRange(rkey, peer->second.owner,
                                         reinterpret_cast<const void*>(remote_addr), length))
                  .empty()) {
    err = "remote access error: " + err;
  } else if (peer->second.recvs.empty()) {
    err = "receiver not ready: no receive posted on the remote QP";
  }
  if (!err.empty()) {
    wc.ok = false;
    wc.error = err;
    fabric_->Complete(this, std::move(wc));
    fabric_->Break(qp, err);
    return Status::OK();
  }
  if (length > 0) std::memcpy(reinterpret_cast<void*>(remote_addr), local, length);
  fabric_->writes_++;
  WorkCompletion rc;
  rc.wr_id = peer->second.recvs.front();
  peer->second.recvs.pop_front();
  rc.qp = peer->first;
  rc.opcode = WcOpcode::kRecvWithImm;
  rc.imm = imm;
  rc.byte_len = length;
  fabric_->Complete(peer->second.owner, std::move(rc));
  fabric_->Complete(this, std::move(wc));
  return Status::OK();
}

Status LoopbackVerbsForTesting::PostRead(QpId qp, uint64_t wr_id, void* local, uint32_t lkey,
                                         uint32_t length, uint64_t remote_addr, uint32_t rkey) {
  MutexLock lock(&fabric_->mu_);
  auto it = fabric_->qps_.find(qp);
  if (it == fabric_->qps_.end() || it->second.owner != this) {
    return NotFound("rdma: no QP " + std::to_string(qp));
  }
  WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.qp = qp;
  wc.opcode = WcOpcode::kRead;
  wc.byte_len = length;
  std::string err;
  auto peer = fabric_->qps_.find(it->second.peer);
  if (it->second.error || peer == fabric_->qps_.end()) {
    err = "work request flushed: the QP is in the error state";
  } else if (!(err = fabric_->CheckRange(lkey, this, local, length)).empty()) {
    err = "local protection error: " + err;
  } else if (!(err = fabric_->CheckRange(rkey, peer->second.owner,
                                         reinterpret_cast<const void*>(remote_addr), length))
                  .empty()) {
    err = "remote access error: " + err;
  }
  if (!err.empty()) {
    wc.ok = false;
    wc.error = err;
    fabric_->Complete(this, std::move(wc));
    fabric_->Break(qp, err);
    return Status::OK();
  }
  std::memcpy(local, reinterpret_cast<const void*>(remote_addr), length);
  fabric_->reads_++;
  fabric_->Complete(this, std::move(wc));
  return Status::OK();
}

Status LoopbackVerbsForTesting::PostRecv(QpId qp, uint64_t wr_id) {
  MutexLock lock(&fabric_->mu_);
  auto it = fabric_->qps_.find(qp);
  if (it == fabric_->qps_.end() || it->second.owner != this) {
    return NotFound("rdma: no QP " + std::to_string(qp));
  }
  if (it->second.error) {
    WorkCompletion wc;
    wc.wr_id = wr_id;
    wc.qp = qp;
    wc.opcode = WcOpcode::kRecvWithImm;
    wc.ok = false;
    wc.error = "receive flushed: the QP is in the error state";
    fabric_->Complete(this, std::move(wc));
    return Status::OK();
  }
  it->second.recvs.push_back(wr_id);
  return Status::OK();
}

StatusOr<int> LoopbackVerbsForTesting::PollCq(std::vector<WorkCompletion>* out, int max) {
  MutexLock lock(&fabric_->mu_);
  if (!cq_error_.empty()) return Internal("rdma: " + cq_error_);
  int n = 0;
  auto now = Clock::now();
  while (n < max && !cq_.empty() && cq_.front().ready <= now) {
    out->push_back(std::move(cq_.front().wc));
    cq_.pop_front();
    n++;
  }
  return n;
}

void LoopbackVerbsForTesting::WaitCqEvent(int timeout_ms) {
  MutexLock lock(&fabric_->mu_);
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  if (!cq_.empty() && cq_.front().ready < deadline) deadline = cq_.front().ready;
  cq_cv_.WaitUntil(&lock, deadline, [&] {
    return woken_ || !cq_error_.empty() || (!cq_.empty() && cq_.front().ready <= Clock::now());
  });
  woken_ = false;
}

void LoopbackVerbsForTesting::Wake() {
  MutexLock lock(&fabric_->mu_);
  woken_ = true;
  cq_cv_.SignalAll();
}

}  // namespace osprey::rdma
