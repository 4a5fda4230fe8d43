// Raw ZeroMQ baseline for `osprey bench transport`: what bare DEALER/ROUTER sockets achieve on
// this machine, so Osprey's transport can be reported next to it in the same run.
//
// Setup: an echo server (ROUTER) runs in a forked child process (see child_server.h for why);
// the client (one DEALER) runs in the calling thread. Both use the message shape Osprey uses:
// three frames -- a 16-byte header, an empty keys frame, a values frame -- plus the routing
// identity on the ROUTER side. Frames of 64 KiB or more are sent zero-copy (zmq_msg_init_data),
// as ps-lite and Osprey do; the receive side keeps ZeroMQ's buffer (no copy).
//
// Shapes (what one round trip moves):
//   kPush: request carries `bytes` of values, reply is the 16-byte header (a push and its ack);
//   kPull: request is the header only, reply carries `bytes` of values (a pull).
//
// Timing: `warmup` round trips are discarded, then `runs` runs of `iters` operations each are
// timed; the result is the median run. gbps = bytes / median time per operation (payload bytes
// only, one direction); msgs_per_sec = 1 / median time per operation. With window > 1, up to
// `window` requests are in flight (pipelined); median_us is then time per message, not latency.
//
// Threading: the functions are blocking and may be called from any one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace osprey::bench {

enum class EchoShape { kPush, kPull };

struct EchoBenchConfig {
  std::string transport = "tcp";  // "tcp" (127.0.0.1) or "ipc" (a socket in /tmp)
  size_t bytes = 4096;
  EchoShape shape = EchoShape::kPush;
  int iters = 1000;  // operations per run
  int runs = 5;
  int warmup = 20;
  int window = 1;  // requests in flight (1 = round-trip latency)
  bool server_in_child_process = true;  // false: echo server in a thread of this process
};

struct RawZmqResult {
  double median_us = 0;  // per operation, median over runs
  double gbps = 0;       // payload GB/s (1e9 bytes/s)
  double msgs_per_sec = 0;
  // CPU time (user+system, client and server processes together) per operation, averaged over
  // the whole case including warm-up: the overhead measure that scheduling noise on a shared
  // machine does not move much.
  double cpu_us = 0;
};

// Runs one benchmark case. Errors: InvalidArgument (unknown transport or bad counts), Internal
// or DeadlineExceeded (the echo server could not be started or stopped), Unavailable (a ZeroMQ
// call failed).
StatusOr<RawZmqResult> RunRawZmqBench(const EchoBenchConfig& config);

// Conveniences over RunRawZmqBench.
StatusOr<RawZmqResult> RawZmqRoundTrip(const std::string& transport, size_t bytes,
                                       EchoShape shape, int iters, int runs);
StatusOr<RawZmqResult> RawZmqPipelined(const std::string& transport, size_t bytes, int window,
                                       int iters, int runs);

// --- shared by the raw and the Osprey-transport echo benchmarks ---

// Frame 0 of every echo request and reply.
struct EchoHeader {
  uint64_t reply_bytes = 0;  // values bytes the server sends back
  uint64_t quit = 0;         // 1: reply, then stop serving
};

// Fills in median_us / gbps / msgs_per_sec from per-run seconds, and cpu_us from the CPU seconds
// the case used.
RawZmqResult SummarizeRuns(std::vector<double> run_seconds, double cpu_seconds,
                           const EchoBenchConfig& config);
// Returns "tcp://127.0.0.1:0" or a fresh "ipc:///tmp/osprey-bench-<pid>-<n>.sock".
StatusOr<std::string> BenchListenEndpoint(const std::string& transport);
Status ValidateEchoConfig(const EchoBenchConfig& config);

}  // namespace osprey::bench
