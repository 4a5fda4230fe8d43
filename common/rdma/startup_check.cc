#include "common/rdma/startup_check.h"

#if OSPREY_HAVE_RDMA
#include "common/rdma/real_verbs.h"
#endif

namespace osprey::rdma {

Status CheckTransportAtStart(const config::PsConfig& c) {
  if (c.cluster.transport != "rdma") return Status::OK();
  if (c.security.mode == config::SecurityMode::kCurve) {
    return FailedPrecondition("cluster.transport rdma cannot be used with security.mode curve: "
                              "the RDMA transport neither encrypts nor authenticates peers (use "
                              "tcp or ipc with curve)");
  }
#if OSPREY_HAVE_RDMA
  DeviceRequest want{c.rdma.device, c.rdma.port, c.rdma.gid_index};
  OSPREY_ASSIGN_OR_RETURN(StackInfo stack, QueryRdmaStack());
  return CheckRdmaDevice(want, stack);
#else
  return FailedPrecondition(
      "cluster.transport is rdma but this build has no RDMA support (libibverbs-dev and "
      "librdmacm-dev were not found when it was configured)");
#endif
}

std::vector<std::pair<std::string, std::string>> RdmaDoctorRows() {
  std::vector<std::pair<std::string, std::string>> rows;
#if OSPREY_HAVE_RDMA
  rows.emplace_back("RDMA transport", "built (protocol tested on loopback verbs only; the real "
                                      "rdma_cm / verbs path has never run on hardware)");
  StatusOr<StackInfo> stack = QueryRdmaStack();
  if (!stack.ok()) {
    rows.emplace_back("RDMA devices", stack.status().ToString());
    return rows;
  }
  if (stack->devices.empty()) rows.emplace_back("RDMA devices", "none (ibv_get_device_list: 0)");
  for (const DeviceInfo& d : stack->devices) {
    if (d.ports.empty()) rows.emplace_back("RDMA device", d.name + ": no port could be queried");
    for (const PortInfo& p : d.ports) {
      std::string gids;
      for (const GidInfo& g : p.gids) {
        gids += (gids.empty() ? "" : ", ") + std::to_string(g.index) + "=" + g.gid;
      }
      rows.emplace_back("RDMA device", d.name + " port " + std::to_string(p.port) + ": " + p.state +
                                           ", " + p.link_layer + ", MTU " +
                                           std::to_string(p.active_mtu) + ", GIDs: " +
                                           (gids.empty() ? "none" : gids));
    }
  }
  rows.emplace_back("RDMA rdma_cm",
                    "rdma_cm can use " + std::to_string(stack->rdma_cm_devices) + " device(s)");
  rows.emplace_back("RDMA device memory",
                    std::string(stack->dmabuf_mr_available
                                    ? "ibv_reg_dmabuf_mr available (whether a NIC accepts a CUDA "
                                      "dmabuf is only known by trying)"
                                    : "no ibv_reg_dmabuf_mr in this libibverbs") +
                        "; GPUDirect sends are not done (the transport sends from host memory)");
#else
  rows.emplace_back("RDMA transport", "not built (libibverbs-dev / librdmacm-dev not found)");
#endif
  return rows;
}

}  // namespace osprey::rdma
