// MakeDataTransport: the transport a server listens on and a worker pushes / pulls through, as
// cluster.transport says -- tcp and ipc: ZeroMQ (MakeTransport with `zmq_options`); rdma: an
// RdmaTransport over the real libibverbs / librdmacm device the rdma section names, sized from
// that section (ring_slots, slot_bytes, inline_threshold, rendezvous_threshold) and from
// `zmq_options` (sndhwm; max_message_bytes as the largest rendezvous frame a peer may announce).
//
// Only the data plane changes with cluster.transport. The control plane -- every node's
// CoordinatorClient and the coordinator's listener -- stays on ZeroMQ (cluster.coordinator, a
// tcp:// endpoint) whatever cluster.transport says: its messages are few and small, it must work
// before any device is known to be usable, and it is where CURVE authenticates nodes.
//
// Errors: FailedPrecondition "built without RDMA" when cluster.transport is rdma and this build
// has no libibverbs / librdmacm (OSPREY_HAVE_RDMA off); the device errors of OpenRealVerbs. The
// mains run CheckTransportAtStart (startup_check.h) first, so these are rare at this point.
#pragma once

#include <memory>
#include <string>

#include "common/config/cluster_config.h"
#include "common/transport.h"

namespace osprey::rdma {

StatusOr<std::unique_ptr<Transport>> MakeDataTransport(const config::PsConfig& c,
                                                       const TransportOptions& zmq_options);

// What a server binds when no --listen is given: "rdma://HOST:0" for rdma ("tcp://HOST:0" and
// "ipc://IPC_DIR/server-PID.sock" are the server main's own).
std::string DefaultRdmaEndpoint(const config::ClusterConfig& c);

}  // namespace osprey::rdma
