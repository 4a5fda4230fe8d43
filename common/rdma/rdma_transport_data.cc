// RdmaTransport: connection setup (dial, accept, attach a QP to a peer) and the data path (write a
// message into the peer's ring, take one out of ours). The rest is in rdma_transport.cc.
#include <cstdlib>
#include <cstring>

#include "common/rdma/rdma_transport.h"
#include "common/rdma/rdma_wire.h"

namespace osprey::rdma {

namespace {
using Clock = std::chrono::steady_clock;
enum WrKind : uint64_t { kWrData = 1, kWrControl = 2, kWrRead = 3, kWrRecv = 4 };
uint64_t WrId(WrKind k, uint32_t index) { return (static_cast<uint64_t>(k) << 28) | index; }
void* AlignedAlloc(size_t n) { return std::aligned_alloc(4096, (n + 4095) / 4096 * 4096); }
}  // namespace

// A full ring of data writes plus the control writes that can be in flight with them (credit
// returns of at least half a ring each, one read-done per rendezvous).
uint32_t ReceivesPerQp(uint32_t ring_slots) { return 2 * ring_slots + 8; }
uint32_t SendsPerQp(uint32_t ring_slots) { return 4 * ring_slots + 64; }

StatusOr<RdmaTransport::Ring> RdmaTransport::NewRing(size_t bytes) {
  Ring r;
  r.bytes = bytes;
  r.mem = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(AlignedAlloc(bytes)), std::free);
  if (!r.mem) return ResourceExhausted("rdma: cannot allocate a " + std::to_string(bytes) + " B ring");
  OSPREY_ASSIGN_OR_RETURN(r.mr, verbs_->RegisterMemory(r.mem.get(), bytes));
  return r;
}

Buffer RdmaTransport::NewReceiveBuffer(size_t n) {
  void* mem = AlignedAlloc(n);
  if (mem == nullptr) return Buffer();
  std::weak_ptr<MrCache> cache = mr_cache_;
  std::shared_ptr<const void> owner(mem, [cache, n](const void* m) {
    if (auto c = cache.lock()) c->Invalidate(m, n);  // invalidated on free
    std::free(const_cast<void*>(m));
  });
  return Buffer(std::move(owner), mem, n);
}

wire::Hello RdmaTransport::MyHello(const Ring& ring) const {
  wire::Hello h{};
  h.magic = wire::kHelloMagic;
  h.ring_addr = reinterpret_cast<uint64_t>(ring.mem.get());
  h.ring_rkey = ring.mr.rkey;
  h.ring_slots = options_.ring_slots;
  h.slot_bytes = options_.slot_bytes;
  h.instance = instance_;
  return h;
}

Status RdmaTransport::Attach(Peer* p, QpId qp, const wire::Hello& remote) {
  OSPREY_ASSIGN_OR_RETURN(p->staging,
                          NewRing(static_cast<size_t>(remote.ring_slots) * remote.slot_bytes));
  p->qp = qp;
  p->remote_addr = remote.ring_addr;
  p->remote_rkey = remote.ring_rkey;
  p->remote_slots = remote.ring_slots;
  p->remote_slot_bytes = remote.slot_bytes;
  p->credits = remote.ring_slots;
  p->owed = 0;
  p->seq = 0;
  p->staging_busy.assign(remote.ring_slots, false);
  p->state = State::kConnected;
  p->error = Status::OK();
  by_qp_[qp] = p->id;
  return Status::OK();
}

// A QP with its receives posted and the ring they land in, before connecting.
static Status PostReceives(Verbs* v, QpId qp, uint32_t slots) {
  for (uint32_t i = 0; i < ReceivesPerQp(slots); ++i) {
    OSPREY_RETURN_IF_ERROR(v->PostRecv(qp, WrId(kWrRecv, i)));
  }
  return Status::OK();
}

void RdmaTransport::Connections() {
  std::vector<std::pair<PeerId, std::string>> due;
  {
    MutexLock lock(&mu_);
    if (stopped_ || !cq_error_.ok()) return;
    auto now = Clock::now();
    for (auto& p : peers_) {
      if (p->dialed && p->state != State::kConnected && p->retry_at <= now) {
        due.emplace_back(p->id, p->host_port);
      }
    }
  }
  for (auto& [id, hp] : due) {
    Status st;
    StatusOr<QpId> qp = verbs_->CreateQp();
    StatusOr<Ring> ring = qp.ok() ? NewRing(size_t{options_.ring_slots} * options_.slot_bytes)
                                  : StatusOr<Ring>(qp.status());
    StatusOr<PrivateData> theirs = ring.status();
    if (ring.ok()) st = PostReceives(verbs_.get(), *qp, options_.ring_slots);
    if (ring.ok() && st.ok()) {
      theirs = verbs_->Connect(*qp, hp, wire::PackHello(MyHello(*ring)));
    } else if (!st.ok()) {
      theirs = st;
    }
    wire::Hello remote{};
    if (theirs.ok() && !wire::UnpackHello(*theirs, &remote)) {
      theirs = DataLoss("rdma: " + hp + " answered with malformed connection data");
    }
    MutexLock lock(&mu_);
    Peer* p = peers_[id].get();
    if (theirs.ok() && !stopped_) {
      bool again = p->state == State::kBroken;
      p->ring = std::move(*ring);
      Status s = Attach(p, *qp, remote);
      if (s.ok()) {
        if (again) rstats_.reconnects++;
        Pump(p);
        continue;
      }
      theirs = s;
    }
    if (qp.ok()) verbs_->DestroyQp(*qp);
    if (ring.ok()) (void)verbs_->DeregisterMemory(ring->mr);
    p->retry_at = Clock::now() + std::chrono::milliseconds(options_.reconnect_interval_ms);
    if (p->state == State::kConnecting && theirs.status().code() != StatusCode::kUnavailable) {
      p->state = State::kBroken;  // not merely "nobody listens yet": say why
    }
    if (p->state == State::kBroken) p->error = theirs.status();
  }
}

StatusOr<PrivateData> RdmaTransport::Accept(QpId qp, const PrivateData& remote_data) {
  wire::Hello remote{};
  if (!wire::UnpackHello(remote_data, &remote)) {
    return InvalidArgument("rdma: a dialer sent malformed connection data");
  }
  OSPREY_ASSIGN_OR_RETURN(Ring ring, NewRing(size_t{options_.ring_slots} * options_.slot_bytes));
  Status posted = PostReceives(verbs_.get(), qp, options_.ring_slots);
  MutexLock lock(&mu_);
  if (!posted.ok() || stopped_ || stop_requested_) {
    (void)verbs_->DeregisterMemory(ring.mr);
    return posted.ok() ? Unavailable("rdma: listener stopped") : posted;
  }
  Peer* p = nullptr;
  auto known = by_instance_.find(remote.instance);
  if (known != by_instance_.end()) {
    p = peers_[known->second].get();  // a reconnect: the same PeerId
    if (p->state != State::kBroken) TearDown(p, Unavailable("rdma: replaced by a reconnect"));
    rstats_.reconnects++;
  } else {
    peers_.push_back(std::make_unique<Peer>());
    p = peers_.back().get();
    p->id = static_cast<PeerId>(peers_.size() - 1);
    p->instance = remote.instance;
    by_instance_[remote.instance] = p->id;
  }
  wire::Hello mine = MyHello(ring);
  p->ring = std::move(ring);
  Status s = Attach(p, qp, remote);
  if (!s.ok()) {
    TearDown(p, s);
    return s;
  }
  return wire::PackHello(mine);
}

void RdmaTransport::Pump(Peer* p) {
  while (p->state == State::kConnected && !p->queued.empty()) {
    if (p->credits == 0 || p->staging_busy[p->seq % p->remote_slots]) {
      rstats_.credit_stalls++;
      return;  // a credit return or a write completion pumps again
    }
    Message m = std::move(p->queued.front());
    p->queued.pop_front();
    Status s = WriteMessage(p, m);
    if (!s.ok()) {
      send_failures_++;
      return TearDown(p, s);
    }
  }
}

Status RdmaTransport::WriteMessage(Peer* p, Message& m) {
  const uint32_t slot = static_cast<uint32_t>(p->seq % p->remote_slots);
  uint8_t* base = p->staging.mem.get() + size_t{slot} * p->remote_slot_bytes;
  wire::SlotHeader h{};
  h.magic = wire::kSlotMagic;
  size_t off = sizeof(h);
  const Buffer* frames[3] = {&m.header, &m.keys, &m.values};
  std::vector<MemoryRegion> mrs;
  for (int i = 0; i < 3; ++i) {
    const Buffer& f = *frames[i];
    h.len[i] = static_cast<uint32_t>(f.size());
    if (f.size() >= options_.rendezvous_threshold || off + f.size() > p->remote_slot_bytes) {
      StatusOr<MemoryRegion> mr = mr_cache_->Acquire(f.data(), f.size(), f.owner());
      if (!mr.ok()) {
        for (const MemoryRegion& r : mrs) mr_cache_->Release(r);
        return mr.status().WithContext("rdma: registering a " + std::to_string(f.size()) +
                                       " B frame");
      }
      h.remote_mask |= 1u << i;
      h.addr[i] = reinterpret_cast<uint64_t>(f.data());
      h.rkey[i] = mr->rkey;
      mrs.push_back(*mr);
    } else {
      if (f.size() > 0) std::memcpy(base + off, f.data(), f.size());
      off += f.size();
    }
  }
  if (!mrs.empty()) {
    h.rendezvous_id = p->next_rendezvous++ & wire::kMaxControlValue;
    rstats_.rendezvous_frames += mrs.size();
    p->out[h.rendezvous_id] = OutRendezvous{m, std::move(mrs)};
  }
  h.credits = p->owed;
  std::memcpy(base, &h, sizeof(h));
  const uint32_t len = static_cast<uint32_t>(off);
  OSPREY_RETURN_IF_ERROR(verbs_->PostWriteWithImm(
      p->qp, WrId(kWrData, slot), base, p->staging.mr.lkey, len,
      p->remote_addr + uint64_t{slot} * p->remote_slot_bytes, p->remote_rkey,
      wire::DataImm(slot, len), len <= options_.inline_threshold));
  p->owed = 0;
  p->credits--;
  p->staging_busy[slot] = true;
  p->seq++;
  rstats_.writes++;
  return Status::OK();
}

void RdmaTransport::HandleRecv(Peer* p, const WorkCompletion& wc) {
  const uint32_t imm = wc.imm;
  if (wire::IsControl(imm)) {
    uint32_t v = wire::ControlValue(imm);
    if (wire::ControlTypeOf(imm) == wire::kCredits) {
      p->credits += v;
      Pump(p);
    } else if (wire::ControlTypeOf(imm) == wire::kReadDone) {
      auto it = p->out.find(v);
      if (it != p->out.end()) {
        for (const MemoryRegion& mr : it->second.mrs) mr_cache_->Release(mr);
        p->out.erase(it);
      }
    } else {
      malformed_++;
    }
    return;
  }
  const uint32_t slot = wire::ImmSlot(imm), len = wire::ImmLen(imm);
  wire::SlotHeader h{};
  const uint8_t* base = p->ring.mem.get() + size_t{slot} * options_.slot_bytes;
  if (slot < options_.ring_slots && len >= sizeof(h) && len <= options_.slot_bytes) {
    std::memcpy(&h, base, sizeof(h));
  }
  if (h.magic != wire::kSlotMagic) {
    malformed_++;
    return TearDown(p, DataLoss("rdma: peer " + std::to_string(p->id) + " wrote a malformed slot " +
                                std::to_string(slot) + " (" + std::to_string(len) + " B)"));
  }
  p->credits += h.credits;
  Inbound in;
  in.msg.peer = p->id;
  in.rendezvous_id = h.rendezvous_id;
  Buffer* frames[3] = {&in.msg.header, &in.msg.keys, &in.msg.values};
  size_t off = sizeof(h);
  for (int i = 0; i < 3; ++i) {
    const size_t n = h.len[i];
    if ((h.remote_mask >> i) & 1) {
      if (n == 0 || n > options_.max_frame_bytes) {
        malformed_++;
        for (const MemoryRegion& r : in.mrs) mr_cache_->Release(r);
        return TearDown(p, DataLoss("rdma: peer " + std::to_string(p->id) + " announced a " +
                                    std::to_string(n) + " B frame (max_frame_bytes " +
                                    std::to_string(options_.max_frame_bytes) + ")"));
      }
      Buffer b = NewReceiveBuffer(n);
      if (b.data() == nullptr) {
        for (const MemoryRegion& r : in.mrs) mr_cache_->Release(r);
        return TearDown(p, ResourceExhausted("rdma: cannot allocate a " + std::to_string(n) +
                                             " B receive buffer"));
      }
      StatusOr<MemoryRegion> mr = mr_cache_->Acquire(b.data(), n);
      Status s = mr.status();
      if (s.ok()) {
        s = verbs_->PostRead(p->qp, WrId(kWrRead, 0), b.mutable_data(), mr->lkey,
                             static_cast<uint32_t>(n), h.addr[i], h.rkey[i]);
        if (!s.ok()) mr_cache_->Release(*mr);
      }
      if (!s.ok()) {
        for (const MemoryRegion& r : in.mrs) mr_cache_->Release(r);
        return TearDown(p, s.WithContext("rdma: reading a rendezvous frame"));
      }
      in.mrs.push_back(*mr);
      in.reads_pending++;
      rstats_.reads++;
      *frames[i] = std::move(b);
    } else {
      if (off + n > len) {
        malformed_++;
        return TearDown(p, DataLoss("rdma: peer " + std::to_string(p->id) +
                                    " wrote frames past the bytes it wrote"));
      }
      *frames[i] = Buffer::Copy(base + off, n);
      off += n;
    }
  }
  p->inbound.push_back(std::move(in));
  // The slot is copied out (or only described a rendezvous): it is free again.
  if (++p->owed >= (options_.ring_slots + 1) / 2) {
    uint32_t owed = p->owed;
    p->owed = 0;
    Control(p, wire::ControlImm(wire::kCredits, owed));
  }
}

}  // namespace osprey::rdma
