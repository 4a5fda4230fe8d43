// LoopbackVerbsForTesting: a TEST DOUBLE of the verbs seam (verbs.h). It exists because no machine
// here has an RDMA NIC (ibv_get_device_list returns 0 devices; the kernel has no rxe/siw), so the
// RdmaTransport protocol -- rings, immediates, credits, rendezvous reads, teardown -- is proved
// against this instead. It is not a network and its speed is not network speed.
//
// A LoopbackFabricForTesting is the "wire" of one test: endpoints ("host:port", port 0 = the next
// free number) registered by listening LoopbackVerbsForTesting objects, memory regions (keys
// checked on every access) and queue pairs. Work requests execute in the posting thread, in post
// order per QP (a global lock), so completions come in order; memory moves with memcpy between
// the registered regions of the two ends. Semantics are those documented in verbs.h.
//
// Faults, injected by a test on the object whose work requests should suffer them:
//   FailNextWrites(n)    the next n writes-with-immediate it posts complete with an error
//                        ("injected completion error") and take the QP pair to the error state;
//   DelayCompletions(d)  completions put on its CQ become visible only d later (order kept);
//   DropConnections()    every connected QP of it goes to the error state; both ends' posted
//                        receives flush with errors (as an rdma_cm disconnect);
//   SetCqCapacity(n)     its CQ holds at most n completions; one more overruns it (PollCq then
//                        returns an error for good, as a real CQ overrun).
// Threading: thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/rdma/verbs.h"

namespace osprey::rdma {

class LoopbackVerbsForTesting;

class LoopbackFabricForTesting : public std::enable_shared_from_this<LoopbackFabricForTesting> {
 public:
  LoopbackFabricForTesting() = default;
  LoopbackFabricForTesting(const LoopbackFabricForTesting&) = delete;
  LoopbackFabricForTesting& operator=(const LoopbackFabricForTesting&) = delete;

  // A new device context attached to this fabric.
  std::shared_ptr<LoopbackVerbsForTesting> NewVerbs();

  uint64_t writes() const;         // writes-with-immediate executed
  uint64_t reads() const;          // RDMA reads executed
  uint64_t registrations() const;  // RegisterMemory calls that succeeded

 private:
  friend class LoopbackVerbsForTesting;
  struct Region {
    LoopbackVerbsForTesting* owner;
    const uint8_t* addr;
    size_t length;
  };
  struct Qp {
    LoopbackVerbsForTesting* owner;
    QpId peer = 0;  // 0: not connected
    bool error = false;
    std::deque<uint64_t> recvs;  // posted receive wr_ids
  };
  struct Completion {
    WorkCompletion wc;
    std::chrono::steady_clock::time_point ready;
  };

  // Checks [p, p+len) lies in region `key` owned by `owner`; "" when fine, else why not.
  std::string CheckRange(uint32_t key, const LoopbackVerbsForTesting* owner, const void* p,
                         size_t len) const REQUIRES(mu_);
  void Complete(LoopbackVerbsForTesting* cq_owner, WorkCompletion wc) REQUIRES(mu_);
  // Puts QP `id` (and its peer) in the error state and flushes their posted receives.
  void Break(QpId id, const std::string& why) REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, LoopbackVerbsForTesting*> listeners_ GUARDED_BY(mu_);
  std::map<uint32_t, Region> regions_ GUARDED_BY(mu_);
  std::map<QpId, Qp> qps_ GUARDED_BY(mu_);
  int next_port_ GUARDED_BY(mu_) = 20000;
  uint32_t next_key_ GUARDED_BY(mu_) = 1;
  QpId next_qp_ GUARDED_BY(mu_) = 1;
  uint64_t writes_ GUARDED_BY(mu_) = 0;
  uint64_t reads_ GUARDED_BY(mu_) = 0;
  uint64_t registrations_ GUARDED_BY(mu_) = 0;
};

class LoopbackVerbsForTesting final : public Verbs {
 public:
  explicit LoopbackVerbsForTesting(std::shared_ptr<LoopbackFabricForTesting> fabric);
  ~LoopbackVerbsForTesting() override;  // stops listening, destroys its QPs, drops its regions

  // Faults (see the file comment).
  void FailNextWrites(int n);
  void DelayCompletions(std::chrono::milliseconds d);
  void DropConnections();
  void SetCqCapacity(size_t n);

  StatusOr<StackInfo> Query() override;
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
  friend class LoopbackFabricForTesting;
  using Fabric = LoopbackFabricForTesting;

  const std::shared_ptr<Fabric> fabric_;
  // Guarded by fabric_->mu_ (one lock for the whole wire).
  std::string listening_;
  AcceptHandler on_accept_;
  std::deque<Fabric::Completion> cq_;
  size_t cq_capacity_ = 1 << 20;
  std::string cq_error_;
  int fail_writes_ = 0;
  std::chrono::milliseconds delay_{0};
  bool woken_ = false;
  CondVar cq_cv_;
};

}  // namespace osprey::rdma
