// RealVerbs: the verbs seam (verbs.h) over libibverbs / librdmacm, and the device check every
// binary runs at start when cluster.transport is rdma.
//
// Tested here only as far as a machine with no RDMA device allows (ibv_get_device_list returns
// 0 devices; the kernel has no rxe/siw): QueryRdmaStack and CheckRdmaDevice run for real (fail
// fast, `osprey doctor`). Everything else -- rdma_cm connection setup (real_verbs_cm.cc), memory
// registration, posting and polling (real_verbs.cc) -- compiles and links against libibverbs /
// librdmacm but has NEVER RUN: no RDMA hardware was available. The protocol above it is proved
// on LoopbackVerbsForTesting, which keeps the same seam contract (verbs.h).
//
// How the seam maps onto rdma_cm (RC queue pairs, RDMA_PS_TCP):
//   - The device context is rdma_cm's own (rdma_get_devices), so the PD and the one CQ are on the
//     context the cm ids resolve to; a connection that resolves to another device is refused,
//     naming both.
//   - Listen: rdma_bind_addr + rdma_listen on a shared event channel served by one event thread.
//     A CONNECT_REQUEST gets rdma_create_qp on the shared PD/CQ (INIT: receives can be posted),
//     the AcceptHandler (on the event thread) and then rdma_accept carrying its private data, or
//     rdma_reject carrying the reason.
//   - CreateQp only reserves a QpId: rdma_create_qp needs the resolved route's device. Receives
//     posted before Connect are kept and posted right after rdma_create_qp, before rdma_connect.
//   - Connect: rdma_resolve_addr, rdma_resolve_route, rdma_create_qp, rdma_connect with the
//     private data (the transport's Hello: ring address, rkey, geometry, instance), waiting for
//     ESTABLISHED, whose private data is the listener's; then the id moves to the shared channel.
//   - DISCONNECTED (the peer went away): rdma_disconnect, which moves the QP to the error state so
//     its posted receives flush with errors, as verbs.h says. DestroyQp: rdma_disconnect,
//     rdma_destroy_qp, rdma_destroy_id.
//   - One deviation from the loopback's strictness: rnr_retry_count is 7 (retry for ever), so a
//     missing receive stalls the sender rather than failing it; the loopback's "receiver not
//     ready" error proves the protocol never needs the retry.
#pragma once

#include <memory>
#include <string>

#include "common/rdma/verbs.h"

namespace osprey::rdma {

// Devices, ports and GIDs as libibverbs reports them; whether ibv_reg_dmabuf_mr exists.
StatusOr<StackInfo> QueryRdmaStack();

// What a binary needs of the RDMA stack: `device` ("" = the first one), `port`, and for a RoCE
// (Ethernet) port a GID at `gid_index`.
struct DeviceRequest {
  std::string device;
  int port = 1;
  int gid_index = 0;
};

// OK when the request is satisfied by `stack`; otherwise FailedPrecondition with one message
// naming what was looked for and what was found ("no RDMA device: ibv_get_device_list found 0").
Status CheckRdmaDevice(const DeviceRequest& want, const StackInfo& stack);

// How big RealVerbs makes its queues (clamped to what the device reports).
struct RealVerbsOptions {
  DeviceRequest device;
  int cq_depth = 65536;          // the one CQ, shared by every QP: sends + receives of all peers
  uint32_t max_send_wr = 512;    // per QP: writes, control writes and reads in flight
  uint32_t max_recv_wr = 256;    // per QP: receives the transport posts (ReceivesPerQp)
  uint32_t max_inline = 128;     // asked for; a device that offers less gets non-inline sends
  int connect_timeout_ms = 5000;  // each of address resolution, route resolution, handshake
};

// Opens the device `o.device` names (after CheckRdmaDevice) through rdma_cm: its context, a
// protection domain, one completion queue with a completion channel, and the rdma_cm event
// channel and thread. FailedPrecondition naming the device when it cannot be opened.
StatusOr<std::shared_ptr<Verbs>> OpenRealVerbs(const RealVerbsOptions& o);

}  // namespace osprey::rdma
