#include "common/rdma/data_transport.h"

#if OSPREY_HAVE_RDMA
#include "common/rdma/rdma_transport.h"
#include "common/rdma/real_verbs.h"
#endif

namespace osprey::rdma {

StatusOr<std::unique_ptr<Transport>> MakeDataTransport(const config::PsConfig& c,
                                                       const TransportOptions& zmq_options) {
  if (c.cluster.transport != "rdma") return MakeTransport(zmq_options);
#if OSPREY_HAVE_RDMA
  RdmaOptions o;
  o.ring_slots = static_cast<uint32_t>(c.rdma.ring_slots);
  o.slot_bytes = static_cast<uint32_t>(c.rdma.slot_bytes);
  o.inline_threshold = static_cast<uint32_t>(c.rdma.inline_threshold);
  o.rendezvous_threshold = static_cast<uint32_t>(c.rdma.rendezvous_threshold);
  o.sndhwm = zmq_options.sndhwm;
  if (zmq_options.max_message_bytes > 0) {
    o.max_frame_bytes = std::min<uint64_t>(o.max_frame_bytes,
                                           static_cast<uint64_t>(zmq_options.max_message_bytes));
  }
  OSPREY_RETURN_IF_ERROR(CheckRdmaOptions(o));
  RealVerbsOptions v;
  v.device = DeviceRequest{c.rdma.device, c.rdma.port, c.rdma.gid_index};
  v.max_recv_wr = ReceivesPerQp(o.ring_slots);
  v.max_send_wr = SendsPerQp(o.ring_slots);
  v.max_inline = o.inline_threshold;
  OSPREY_ASSIGN_OR_RETURN(std::shared_ptr<Verbs> verbs, OpenRealVerbs(v));
  return std::unique_ptr<Transport>(new RdmaTransport(o, std::move(verbs)));
#else
  return FailedPrecondition("cluster.transport is rdma but this binary was built without RDMA "
                            "(libibverbs-dev / librdmacm-dev not found when it was configured)");
#endif
}

std::string DefaultRdmaEndpoint(const config::ClusterConfig& c) {
  return "rdma://" + c.host + ":0";
}

}  // namespace osprey::rdma
