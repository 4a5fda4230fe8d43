#include "common/transport.h"

#include "common/inproc_transport.h"
#include "common/zmq_transport.h"

namespace osprey {

StatusOr<std::unique_ptr<Transport>> MakeTransport(const TransportOptions& options) {
  if (options.kind == "zmq") {
    if (options.io_threads < 1 || options.sndhwm < 0 || options.rcvhwm < 0 ||
        options.linger_ms < -1) {
      return InvalidArgument("transport: io_threads must be >= 1, sndhwm/rcvhwm >= 0, "
                             "linger_ms >= -1");
    }
    return std::unique_ptr<Transport>(new ZmqTransport(options));
  }
  if (options.kind == "inproc") {
    if (options.hub == nullptr) {
      return InvalidArgument("transport: kind \"inproc\" needs TransportOptions::hub");
    }
    return std::unique_ptr<Transport>(new InprocTransport(options.hub));
  }
  return InvalidArgument("transport: unknown kind \"" + options.kind +
                         "\" (want \"zmq\" or \"inproc\")");
}

}  // namespace osprey
