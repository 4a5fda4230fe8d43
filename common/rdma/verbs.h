// Verbs: the narrow seam between RdmaTransport and the RDMA stack -- exactly the verbs the
// transport uses and nothing more: register / deregister memory, post an RDMA WRITE with
// immediate, post an RDMA READ, post a receive, poll the completion queue (and wait for a CQ
// event), create a queue pair and connect it to an endpoint or accept one, and query devices.
//
// Two implementations:
//   - RealVerbs (real_verbs.h): libibverbs + librdmacm (rdma_cm RC connections). Device
//     discovery and the fail-fast check run here; connection setup and the data path compile and
//     link but have never run (no RDMA device here). RealVerbs retries receiver-not-ready (RNR)
//     instead of failing (real_verbs.h); the loopback's strict error proves the protocol never
//     needs that.
//   - LoopbackVerbsForTesting (loopback_verbs_for_testing.h): an in-process test double that moves
//     bytes between registered regions of endpoints of one LoopbackFabricForTesting and can
//     inject faults.
//
// One Verbs object is one device context of one transport: one protection domain and one
// completion queue shared by all of its queue pairs. Semantics follow RC queue pairs:
//   - Work requests on one QP execute and complete in post order.
//   - A write with immediate consumes one receive posted on the remote QP; its completion there
//     carries the immediate and the byte count. No posted receive: the sender's completion fails
//     (receiver not ready) and both QPs go to the error state.
//   - Local and remote ranges must lie inside a registered region whose lkey / rkey they name;
//     otherwise the completion fails and the QP pair goes to the error state.
//   - A QP in the error state completes every later work request -- and flushes its posted
//     receives -- with an error; a dropped connection does the same to both ends.
// Threading: every method is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace osprey::rdma {

using QpId = uint32_t;

struct MemoryRegion {
  const void* addr = nullptr;
  size_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint64_t handle = 0;  // implementation's own (RealVerbs: the ibv_mr*)
};

enum class WcOpcode : uint8_t { kWrite, kRead, kRecvWithImm };

struct WorkCompletion {
  uint64_t wr_id = 0;
  QpId qp = 0;
  WcOpcode opcode = WcOpcode::kWrite;
  bool ok = true;
  std::string error;  // !ok: what failed (e.g. "remote access error: rkey 7 ...")
  uint32_t imm = 0;       // kRecvWithImm
  uint32_t byte_len = 0;  // kRecvWithImm / kRead
};

struct GidInfo {
  int index = 0;
  std::string gid;   // "fe80:0000:..."
};

struct PortInfo {
  int port = 1;
  std::string state;       // "active", "down", ...
  std::string link_layer;  // "InfiniBand", "Ethernet"
  int active_mtu = 0;      // bytes
  std::vector<GidInfo> gids;  // non-zero GIDs
};

struct DeviceInfo {
  std::string name;
  std::vector<PortInfo> ports;
};

// What the stack can do beyond the devices.
struct StackInfo {
  std::vector<DeviceInfo> devices;
  // libibverbs offers ibv_reg_dmabuf_mr (device memory, e.g. a CUDA dmabuf fd, can be registered
  // when the NIC and driver allow it). The transport does not use device memory yet.
  bool dmabuf_mr_available = false;
  // Devices rdma_cm (librdmacm's rdma_get_devices) can use: the transport's connections go
  // through it, so a device libibverbs lists but rdma_cm does not is of no use to it.
  int rdma_cm_devices = 0;
};

// Bytes a connect request or accept carries (rdma_cm private data: at most 56 bytes for RC).
using PrivateData = std::vector<uint8_t>;
constexpr size_t kMaxPrivateData = 56;

class Verbs {
 public:
  // Called (on any thread) when a dialer connects to a listening endpoint: `qp` is the new local
  // QP (already created; post receives on it before returning), `remote` the dialer's private
  // data. Return this side's private data, or an error to reject the connection.
  using AcceptHandler = std::function<StatusOr<PrivateData>(QpId qp, const PrivateData& remote)>;

  virtual ~Verbs() = default;

  virtual StatusOr<StackInfo> Query() = 0;

  virtual StatusOr<MemoryRegion> RegisterMemory(const void* addr, size_t length) = 0;
  virtual Status DeregisterMemory(const MemoryRegion& mr) = 0;

  // "host:port" (port 0: any); returns the bound "host:port". Unavailable when taken.
  virtual StatusOr<std::string> Listen(const std::string& host_port, AcceptHandler on_accept) = 0;
  virtual void StopListening() = 0;
  // A new QP on this context's CQ, not yet connected (post receives, then Connect).
  virtual StatusOr<QpId> CreateQp() = 0;
  // Connects `qp` to a listener and returns the listener's private data. Blocks until the
  // connection is established or refused. Unavailable: nothing listens there.
  virtual StatusOr<PrivateData> Connect(QpId qp, const std::string& host_port,
                                        const PrivateData& mine) = 0;
  // Disconnects (the peer's receives flush with errors) and frees the QP.
  virtual void DestroyQp(QpId qp) = 0;

  virtual Status PostWriteWithImm(QpId qp, uint64_t wr_id, const void* local, uint32_t lkey,
                                  uint32_t length, uint64_t remote_addr, uint32_t rkey,
                                  uint32_t imm, bool inline_data) = 0;
  virtual Status PostRead(QpId qp, uint64_t wr_id, void* local, uint32_t lkey, uint32_t length,
                          uint64_t remote_addr, uint32_t rkey) = 0;
  // A receive for a write with immediate (no buffer: the data lands where the writer put it).
  virtual Status PostRecv(QpId qp, uint64_t wr_id) = 0;

  // Moves up to `max` completions into *out (appends); returns how many. An error Status means the
  // CQ itself failed (overrun) and no later completion can be trusted.
  virtual StatusOr<int> PollCq(std::vector<WorkCompletion>* out, int max) = 0;
  // Blocks until the CQ may have a completion or `timeout_ms` passes (ibv_req_notify_cq +
  // ibv_get_cq_event). Spurious wake-ups are allowed; PollCq after it.
  virtual void WaitCqEvent(int timeout_ms) = 0;
  // Wakes a WaitCqEvent (so the poller notices a stop).
  virtual void Wake() = 0;
};

}  // namespace osprey::rdma
