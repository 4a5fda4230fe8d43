// RdmaTransport: the Transport (common/transport.h) over RDMA reliable-connected queue pairs,
// through the verbs seam (verbs.h) -- RealVerbs on a machine with a NIC, LoopbackVerbsForTesting
// in tests. Endpoints are "rdma://host:port" (rdma_cm addresses).
//
// Protocol (wire format in rdma_wire.h), per peer pair, symmetric:
//   - One QP per peer pair, all on the transport's one CQ, drained by one poller thread that
//     busy-polls for busy_poll_us after the last completion and then waits for a CQ event.
//     Handlers run on that thread, in arrival order per peer.
//   - Each side registers a receive ring of ring_slots x slot_bytes and tells the other side its
//     address and rkey in the connection's private data. A message is RDMA-written (from a
//     registered staging slot) into the peer's next ring slot with the immediate naming the slot
//     and the length; frames of >= rendezvous_threshold bytes, or that do not fit the slot, stay
//     in the sender's memory (registered through the MR cache, no copy) and the receiver
//     RDMA-READs them into a fresh buffer, then tells the sender (kReadDone) so it releases them.
//   - Credits: a sender may have at most ring_slots unacknowledged messages in the peer's ring.
//     The receiver frees a slot as soon as it has copied it out and returns the credit
//     piggybacked on its next message, or in a zero-length control write once half the ring is
//     owed. A sender without credit queues the message (Send never blocks) -- it never
//     overwrites a slot.
//   - Errors: a failed completion, a flushed receive or a failed post tears down only that peer:
//     its queued and in-flight messages are dropped, PeerStatus() says why and Send() to it
//     returns Unavailable with that reason. A dialer reconnects every reconnect_interval_ms; the
//     listener recognises the dialer (by its instance id) and keeps its PeerId. A CQ failure
//     (overrun) tears down every peer.
// Not done: device memory (GPUDirect) -- the transport sends from host memory only; `osprey
// doctor` says whether ibv_reg_dmabuf_mr is there.
// Threading: as for Transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/rdma/mr_cache.h"
#include "common/rdma/rdma_wire.h"
#include "common/rdma/verbs.h"
#include "common/transport.h"

namespace osprey::rdma {

struct RdmaOptions {
  uint32_t ring_slots = 64;            // receive slots per peer (<= 2048)
  uint32_t slot_bytes = 64 << 10;      // bytes per slot (< 1 MiB)
  uint32_t inline_threshold = 128;     // writes this small go as inline sends (IBV_SEND_INLINE)
  uint32_t rendezvous_threshold = 32 << 10;  // frames this large go by RDMA READ
  size_t mr_cache_entries = 256;
  int busy_poll_us = 50;
  int reconnect_interval_ms = 20;
  int sndhwm = 0;  // queued messages per peer before Send says ResourceExhausted; 0 = unlimited
  // The largest rendezvous frame a peer may announce; a larger one tears that peer down before
  // anything is allocated (as ZMQ_MAXMSGSIZE does for the ZeroMQ transport).
  uint64_t max_frame_bytes = (uint64_t{1} << 32) - 1;  // also the wire's limit (32-bit lengths)
};
Status CheckRdmaOptions(const RdmaOptions& o);

struct RdmaStats {
  uint64_t writes = 0;          // data writes posted
  uint64_t control_writes = 0;  // credit / read-done writes posted
  uint64_t credit_stalls = 0;   // times a queued message had to wait for credit
  uint64_t rendezvous_frames = 0;  // frames the peer fetched by READ (sent)
  uint64_t reads = 0;              // READs posted (received)
  uint64_t teardowns = 0;
  uint64_t reconnects = 0;
};

class RdmaTransport final : public Transport {
 public:
  RdmaTransport(const RdmaOptions& options, std::shared_ptr<Verbs> verbs);
  ~RdmaTransport() override;

  RdmaTransport(const RdmaTransport&) = delete;
  RdmaTransport& operator=(const RdmaTransport&) = delete;

  StatusOr<std::string> Listen(const std::string& endpoint) override;
  StatusOr<PeerId> Connect(const std::string& endpoint) override;
  void SetHandler(Handler handler) override;
  Status Start() override;
  void Stop() override;
  Status Send(Message msg) override;
  TransportStats stats() const override;

  // Send: as Transport::Send; also InvalidArgument for a frame of 4 GiB or more (the wire's
  // lengths are 32-bit).
  // OK while `peer` is connected or connecting; else why it was torn down. NotFound if unknown.
  Status PeerStatus(PeerId peer) const;
  RdmaStats rdma_stats() const;
  MrCacheStats mr_cache_stats() const { return mr_cache_->stats(); }

 private:
  enum class State { kConnecting, kConnected, kBroken };
  struct Ring {  // registered, page-aligned memory
    std::shared_ptr<uint8_t> mem;
    size_t bytes = 0;
    MemoryRegion mr;
  };
  struct OutRendezvous {
    Message msg;  // keeps the frames alive until the reader says kReadDone
    std::vector<MemoryRegion> mrs;
  };
  struct Inbound {
    Message msg;
    int reads_pending = 0;
    uint32_t rendezvous_id = 0;
    std::vector<MemoryRegion> mrs;  // of the read targets
  };
  struct Peer {
    PeerId id = -1;
    bool dialed = false;
    std::string host_port;  // dialed: where to
    uint64_t instance = 0;  // accepted: the dialer's instance id
    State state = State::kConnecting;
    Status error;
    QpId qp = 0;
    Ring ring, staging;
    uint64_t remote_addr = 0;
    uint32_t remote_rkey = 0, remote_slots = 0, remote_slot_bytes = 0;
    uint32_t credits = 0, owed = 0;  // free remote slots; freed local slots not yet returned
    uint64_t seq = 0;                // messages written on this connection
    std::vector<bool> staging_busy;
    std::deque<Message> queued;
    std::map<uint32_t, OutRendezvous> out;
    uint32_t next_rendezvous = 0;
    std::deque<Inbound> inbound;
    std::chrono::steady_clock::time_point retry_at{};
  };

  void Run();
  bool PollOnce(std::vector<Message>* deliver) EXCLUDES(mu_);
  void Connections() EXCLUDES(mu_);
  void HandleCompletion(const WorkCompletion& wc, std::vector<Message>* deliver) REQUIRES(mu_);
  void HandleRecv(Peer* p, const WorkCompletion& wc) REQUIRES(mu_);
  void Pump(Peer* p) REQUIRES(mu_);
  Status WriteMessage(Peer* p, Message& m) REQUIRES(mu_);
  void Control(Peer* p, uint32_t imm) REQUIRES(mu_);
  void Deliverable(Peer* p, std::vector<Message>* deliver) REQUIRES(mu_);
  void TearDown(Peer* p, Status why) REQUIRES(mu_);
  StatusOr<Ring> NewRing(size_t bytes);
  Status Attach(Peer* p, QpId qp, const wire::Hello& remote) REQUIRES(mu_);
  StatusOr<PrivateData> Accept(QpId qp, const PrivateData& remote) EXCLUDES(mu_);
  wire::Hello MyHello(const Ring& ring) const;
  Buffer NewReceiveBuffer(size_t n);

  const RdmaOptions options_;
  const std::shared_ptr<Verbs> verbs_;
  const std::shared_ptr<MrCache> mr_cache_;
  const uint64_t instance_;
  Handler handler_;
  std::thread poller_;
  std::atomic<std::thread::id> poller_id_{};
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint64_t> messages_sent_{0}, messages_received_{0}, bytes_sent_{0},
      bytes_received_{0}, malformed_{0}, send_failures_{0};

  mutable Mutex mu_;
  bool started_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  bool listening_ GUARDED_BY(mu_) = false;
  Status cq_error_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Peer>> peers_ GUARDED_BY(mu_);  // index = PeerId
  std::unordered_map<QpId, PeerId> by_qp_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, PeerId> by_instance_ GUARDED_BY(mu_);  // accepted dialers
  RdmaStats rstats_ GUARDED_BY(mu_);
};

// Receives the transport posts on each QP, and the work requests it may have posted on one QP's
// send queue at once (ring_slots data writes, credit / read-done writes, up to three reads per
// received message -- reads are not bounded by credits, so that part is an estimate; a full send
// queue tears the peer down with ResourceExhausted): what a Verbs's QPs must hold.
uint32_t ReceivesPerQp(uint32_t ring_slots);
uint32_t SendsPerQp(uint32_t ring_slots);

// "rdma://host:port" -> "host:port"; InvalidArgument naming the endpoint otherwise.
StatusOr<std::string> ParseRdmaEndpoint(const std::string& endpoint);

}  // namespace osprey::rdma
