// RealVerbs: the verbs seam (verbs.h) over libibverbs + librdmacm. Internal to common/rdma: made
// by OpenRealVerbs (real_verbs.h, which also says how the seam maps onto rdma_cm and that none of
// this has run on hardware). real_verbs.cc holds the data path, real_verbs_cm.cc connection setup.
//
// Threads: every public method is thread-safe. One event thread (started by the constructor,
// joined by the destructor) serves the shared rdma_cm event channel: connect requests (it runs
// the AcceptHandler) and disconnects. rdma_destroy_id waits until every event reported for that
// id is acknowledged, so the event thread acknowledges an event before it calls out of this class
// and never holds mu_ while blocking. DestroyQp must not race Connect on the same QP (the
// transport dials and gives up a dialed QP on one thread).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <map>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/rdma/real_verbs.h"

namespace osprey::rdma::internal {

// What one OpenRealVerbs found and made; RealVerbs owns all of it.
struct RealDevice {
  ibv_context** devices = nullptr;  // rdma_get_devices' list (freed by rdma_free_devices)
  ibv_context* ctx = nullptr;       // the chosen one (rdma_cm's: not closed by us)
  ibv_device_attr attr{};
  ibv_pd* pd = nullptr;
  ibv_comp_channel* cq_channel = nullptr;
  ibv_cq* cq = nullptr;
  rdma_event_channel* events = nullptr;  // listener + established connections
  int cq_wake_fd = -1;                   // eventfd: Wake()
  int events_wake_fd = -1;               // eventfd: stops the event thread
};

class RealVerbs final : public Verbs {
 public:
  RealVerbs(const RealVerbsOptions& options, RealDevice device);
  ~RealVerbs() override;

  StatusOr<StackInfo> Query() override { return QueryRdmaStack(); }
  StatusOr<MemoryRegion> RegisterMemory(const void* addr, size_t length) override;
  Status DeregisterMemory(const MemoryRegion& mr) override;
  StatusOr<std::string> Listen(const std::string& host_port, AcceptHandler on_accept) override;
  void StopListening() override;
  StatusOr<QpId> CreateQp() override;
  StatusOr<PrivateData> Connect(QpId qp, const std::string& host_port,
                                const PrivateData& mine) override;
  void DestroyQp(QpId qp) override;
  Status PostWriteWithImm(QpId qp, uint64_t wr_id, const void* local, uint32_t lkey,
                          uint32_t length, uint64_t remote_addr, uint32_t rkey, uint32_t imm,
                          bool inline_data) override;
  Status PostRead(QpId qp, uint64_t wr_id, void* local, uint32_t lkey, uint32_t length,
                  uint64_t remote_addr, uint32_t rkey) override;
  Status PostRecv(QpId qp, uint64_t wr_id) override;
  StatusOr<int> PollCq(std::vector<WorkCompletion>* out, int max) override;
  void WaitCqEvent(int timeout_ms) override;
  void Wake() override;

 private:
  struct Conn {
    rdma_cm_id* id = nullptr;             // null until Connect (dialer) / set at once (accepted)
    std::vector<uint64_t> early_recvs;    // posted before the QP existed
    uint32_t max_inline = 0;              // what the device granted
  };

  // rdma_create_qp on `id` with the shared PD and CQ; records the QP under `qp` and posts the
  // receives posted before it existed.
  Status CreateQpOn(rdma_cm_id* id, QpId qp) REQUIRES(mu_);
  Status PostSend(QpId qp, ibv_send_wr* wr, uint32_t length);
  rdma_conn_param ConnParam(const PrivateData& data, uint8_t their_initiator,
                            uint8_t their_responder) const;
  void EventLoop();
  void OnConnectRequest(rdma_cm_id* id, const PrivateData& remote, uint8_t initiator,
                        uint8_t responder);
  // The QP of the connection `id` belongs to goes to the error state (its receives flush).
  void FailConnection(rdma_cm_id* id, bool disconnect) EXCLUDES(mu_);
  // Removes `qp`'s record and returns its cm id (null if none): the caller then owns the id.
  rdma_cm_id* TakeConn(QpId qp) EXCLUDES(mu_);
  std::string DeviceName(ibv_context* ctx) const;

  const RealVerbsOptions options_;
  RealDevice dev_;
  std::thread event_thread_;
  std::atomic<bool> stopping_{false};

  Mutex mu_;
  std::map<QpId, Conn> conns_ GUARDED_BY(mu_);
  std::unordered_map<uint32_t, QpId> by_qpn_ GUARDED_BY(mu_);  // ibv qp_num -> QpId
  QpId next_qp_ GUARDED_BY(mu_) = 1;
  rdma_cm_id* listener_ GUARDED_BY(mu_) = nullptr;
  AcceptHandler on_accept_ GUARDED_BY(mu_);
  int accepting_ GUARDED_BY(mu_) = 0;  // AcceptHandler calls under way (StopListening waits)
  CondVar accept_cv_;

  Mutex cq_mu_;  // PollCq / WaitCqEvent (the poller thread's; locked for the thread-safety claim)
  std::vector<ibv_wc> stash_ GUARDED_BY(cq_mu_);  // polled by WaitCqEvent, handed out by PollCq
};

}  // namespace osprey::rdma::internal
