// Endpoint checks of the ZeroMQ transport (zmq_transport.h), kept apart from its socket loop:
// which endpoints it takes, whether an ipc:// path is still served by a live listener, and what a
// failed bind means.
#pragma once

#include <string>

#include "common/status.h"

namespace osprey {

// OK for tcp://... and ipc://...; InvalidArgument (saying what to use) for anything else.
Status CheckZmqEndpoint(const std::string& endpoint);
// ZeroMQ's ipc bind silently unlinks an existing socket file, which would steal the path from a
// live listener: Unavailable when something accepts connections at an ipc:// endpoint's path.
Status CheckIpcPathFree(const std::string& endpoint);
// The Status of a failed zmq_bind: InvalidArgument for a bad address, Unavailable otherwise.
Status ZmqBindError(const std::string& endpoint, int err);

}  // namespace osprey
