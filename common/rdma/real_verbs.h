// RealVerbs: the verbs seam (verbs.h) over libibverbs / librdmacm, and the device check every
// binary runs at start when cluster.transport is rdma.
//
// Tested here only as far as a machine with no RDMA device allows (ibv_get_device_list returns
// 0 devices; the kernel has no rxe/siw): QueryRdmaStack and CheckRdmaDevice run for real (fail
// fast, `osprey doctor`). Memory registration, posting and polling are written against
// libibverbs but unexercised; connection setup through rdma_cm is NOT written yet (Listen,
// CreateQp and Connect return Unimplemented) -- it needs hardware to be tested.
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

// Opens the device `want` names (after CheckRdmaDevice): its context, a protection domain and one
// completion queue of `cq_depth` entries with a completion channel.
StatusOr<std::shared_ptr<Verbs>> OpenRealVerbs(const DeviceRequest& want, int cq_depth);

}  // namespace osprey::rdma
