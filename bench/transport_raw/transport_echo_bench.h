// The raw ZeroMQ echo benchmark (raw_zmq_bench.h) run over Osprey's ZmqTransport, so the two can
// be printed side by side: same message shape, same forked echo server setup, same timing.
//
// The echo server in the child is a ZmqTransport listener whose handler replies with Send from
// the I/O thread. The client is a ZmqTransport dialer driven one of two ways:
//   kCallerThread: the calling thread Sends and waits (condition variable) until the handler has
//     seen the reply -- how Osprey's client uses the transport; includes the wake-up of the
//     waiting thread, which raw ZeroMQ (send and recv on one thread) does not pay;
//   kHandler: the handler sends the next request itself -- the transport's own cost.
//
// Threading: blocking; call from one thread at a time.
#pragma once

#include "bench/transport_raw/raw_zmq_bench.h"
#include "common/transport.h"

namespace osprey::bench {

enum class EchoDriver { kCallerThread, kHandler };

// Errors as RunRawZmqBench, plus the transport's Listen/Connect/Send errors.
StatusOr<RawZmqResult> RunTransportEchoBench(const EchoBenchConfig& config,
                                             const TransportOptions& options, EchoDriver driver);

}  // namespace osprey::bench
