// `osprey bench transport --transport rdma` on a machine without an RDMA NIC: the RdmaTransport
// over LoopbackVerbsForTesting (the verbs test double), next to ZmqTransport over ipc:// and the
// InprocTransport, all in this process: ping-pong round trips of a few sizes, timed by process
// CPU time (getrusage: both ends' work) and wall time per message. These figures are the CPU
// cost of the protocol's bookkeeping -- NOT network speed: no RDMA hardware is measured.
#pragma once

#include <string>

#include "common/status.h"

namespace osprey::bench {

// Prints a table (median of `runs` runs per case) and, with `json_path`, writes a JSON array.
Status RunRdmaLoopbackBench(int runs, bool quick, const std::string& json_path);

}  // namespace osprey::bench
