#include "common/transport.h"

#include "common/inproc_transport.h"
#include "common/zmq_curve.h"
#include "common/zmq_transport.h"

namespace osprey {

const char* PeerRoleName(PeerRole role) {
  switch (role) {
    case PeerRole::kCoordinator: return "coordinator";
    case PeerRole::kServer: return "server";
    case PeerRole::kWorker: return "worker";
    case PeerRole::kAdmin: return "admin";
    case PeerRole::kUnauthenticated: break;
  }
  return "unauthenticated";
}

bool ParsePeerRole(const std::string& name, PeerRole* role) {
  for (PeerRole r : {PeerRole::kCoordinator, PeerRole::kServer, PeerRole::kWorker,
                     PeerRole::kAdmin}) {
    if (name == PeerRoleName(r)) {
      *role = r;
      return true;
    }
  }
  return false;
}

StatusOr<std::unique_ptr<Transport>> MakeTransport(const TransportOptions& options) {
  if (options.kind == "zmq") {
    if (options.io_threads < 1 || options.sndhwm < 0 || options.rcvhwm < 0 ||
        options.linger_ms < -1) {
      return InvalidArgument("transport: io_threads must be >= 1, sndhwm/rcvhwm >= 0, "
                             "linger_ms >= -1");
    }
    if (options.curve.enabled) OSPREY_RETURN_IF_ERROR(CheckCurveOptions(options.curve));
    return std::unique_ptr<Transport>(new ZmqTransport(options));
  }
  if (options.kind == "inproc") {
    if (options.hub == nullptr) {
      return InvalidArgument("transport: kind \"inproc\" needs TransportOptions::hub");
    }
    if (options.curve.enabled) {
      return InvalidArgument("transport: CURVE needs kind \"zmq\" (in-process transports are "
                             "not encrypted; a test gives the peer role itself)");
    }
    return std::unique_ptr<Transport>(new InprocTransport(options.hub));
  }
  return InvalidArgument("transport: unknown kind \"" + options.kind +
                         "\" (want \"zmq\" or \"inproc\"; rdma transports are made by "
                         "rdma::MakeDataTransport, common/rdma/data_transport.h)");
}

}  // namespace osprey
