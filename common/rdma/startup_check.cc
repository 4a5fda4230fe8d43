#include "common/rdma/startup_check.h"

#if OSPREY_HAVE_RDMA
#include "common/rdma/real_verbs.h"
#endif

namespace osprey::rdma {

Status CheckTransportAtStart(const config::PsConfig& c) {
  if (c.cluster.transport != "rdma") return Status::OK();
#if OSPREY_HAVE_RDMA
  DeviceRequest want{c.rdma.device, c.rdma.port, c.rdma.gid_index};
  OSPREY_ASSIGN_OR_RETURN(StackInfo stack, QueryRdmaStack());
  OSPREY_RETURN_IF_ERROR(CheckRdmaDevice(want, stack));
  // A usable device, but the real connection setup is not written (real_verbs.h): say so now
  // rather than fail on the first connect.
  return FailedPrecondition(
      "cluster.transport is rdma and the RDMA device is usable, but this build's real-verbs "
      "connection setup (rdma_cm) is not written yet; use cluster.transport tcp");
#else
  return FailedPrecondition(
      "cluster.transport is rdma but this build has no RDMA support (libibverbs-dev and "
      "librdmacm-dev were not found when it was configured)");
#endif
}

}  // namespace osprey::rdma
