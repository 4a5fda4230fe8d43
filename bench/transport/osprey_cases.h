// The client side of osprey-bench-transport: times push, pull and push+pull of dense and sparse
// tables through a worker::Client talking to a real server (bench/transport/server_process.h).
//
// What one operation is (the unit median_s is per):
//   dense push      PushDense(table, Buffer) + Wait: the zero-copy push of the whole table (chunks
//                   of at most 2 MiB, the default; one message, or parts of push_part_bytes); the
//                   Buffer is allocated once and reused by every push.
//   dense pull      PullDense(table, out) + Wait into a vector allocated once.
//   dense pull_buffer  PullDense(table, &buffer) + Wait: the reply frame handed over as a
//                   Buffer, no client-side copy (the previous reply is dropped by the next).
//   push+pull       a push, waited, then a pull of the same table, waited (a training step's
//                   exchange); time for both.
//   pipelined push  `window` dense pushes issued back to back, then all waited; median_s is per
//                   batch of `window` requests.
//   sparse push     Push(table, keys, n, grads) + Wait: one call with all n keys (one server, so
//                   one message); the server applies an SGD step per key. Keys are random u64
//                   from a fixed seed, created on the server by a pull before anything is timed.
//   sparse pull     Pull(table, keys, n, out) + Wait.
//   sparse push_bf16 / pull_bf16  the sparse push / pull with the rows sent as bf16
//                   (Client::SetEncoder with MakeRowCastEncoder / SetSparsePullCodec): half the row bytes, plus
//                   the casts on both sides.
//   sparse push_buffers  the zero-copy sparse push: keys and rows as Buffers (Client::Push of
//                   Buffers); with one server the frames sent are those Buffers, not copies.
//   sparse pull_x3  kPullThreads threads of one client each do a sparse pull of their own n keys
//                   at once (as a GPU worker's pullers do), all waited; median_s is per batch of
//                   kPullThreads pulls, the record reports it per pull.
//
// Timing (TimeOp): warm-up calls first (at least 3 and at least half a run's worth of time: first
// touches of buffers, rows, sockets), then `runs` runs of `iters` calls, where iters is chosen
// from the warm-up so one run lasts about min_run_s (at least 2 calls); the result is the median
// run divided by iters.
//
// Threading: an OspreyBench is used by one thread. It owns a worker::Client and therefore a
// ZeroMQ context and I/O threads; destroy it before anything forks (ServerProcess::Start and the
// raw ZeroMQ baseline do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/stats.h"
#include "common/status.h"
#include "proto/wire.h"
#include "worker/client/client.h"

namespace osprey::bench {

enum class BenchOp {
  kPush, kPull, kPushPull, kPipelinedPush, kPullBuffer, kThreadedPull, kPushBf16, kPullBf16, kPushBuffers
};

// Threads of the kThreadedPull case (the GPU worker's default worker.pull_threads).
constexpr int kPullThreads = 3;

// "push", "pull", "pushpull", "pipelined_push", "pull_buffer", "pull_x3", "push_bf16", "pull_bf16",
// "push_buffers"
// (the JSON names).
const char* BenchOpName(BenchOp op);

struct TimingOptions {
  int runs = 5;
  double min_run_s = 0.05;
  // CPU seconds used so far by what the timing should charge (the client and server processes);
  // read before and after the timed runs. Unset: no CPU figure.
  std::function<double()> cpu_seconds;
};

struct OpTiming {
  double median_s = 0;  // per operation
  int iters = 0;        // operations per run
  double cpu_s = -1;    // TimingOptions::cpu_seconds used per operation over the timed runs; -1: none
};

// Runs `op` as described above. Returns the first error `op` returns.
StatusOr<OpTiming> TimeOp(const std::function<Status()>& op, const TimingOptions& options);


// The client's ClientOptions::push_part_bytes and pull_part_bytes (0: never in parts), and
// receive_in_wait.
struct ClientTuning {
  size_t push = 0;
  size_t pull = 0;
  bool receive_in_wait = true;
};

class OspreyBench {
 public:
  // Starts a client (ZeroMQ transport, timeout_ms 60000, push and pull parts as given) for the
  // server(s) of `map`.
  static StatusOr<std::unique_ptr<OspreyBench>> Connect(const proto::ShardMap& map,
                                                        const TransportOptions& options = {},
                                                        ClientTuning parts = {});
  ~OspreyBench();

  // Dense table `table_name` (its whole size): kPush, kPull, kPullBuffer or kPushPull.
  StatusOr<OpTiming> Dense(const std::string& table_name, BenchOp op,
                           const TimingOptions& options);
  // `window` pushes of dense table `table_name` in flight per batch; median_s is per batch.
  StatusOr<OpTiming> PipelinedPush(const std::string& table_name, int window,
                                   const TimingOptions& options);
  // Sparse table `table_name` (its dim from the map), `num_keys` random keys from `seed`.
  StatusOr<OpTiming> Sparse(const std::string& table_name, size_t num_keys, uint64_t seed,
                            BenchOp op, const TimingOptions& options);
  // kThreadedPull of `table_name`: kPullThreads threads, `num_keys` keys each (seeds seed + t).
  StatusOr<OpTiming> ThreadedSparsePull(const std::string& table_name, size_t num_keys, uint64_t seed,
                                        const TimingOptions& options);

 private:
  explicit OspreyBench(std::unique_ptr<worker::Client> client) : client_(std::move(client)) {}
  // Table id of `name` after checking that it is dense (sparse == false) or sparse.
  StatusOr<uint32_t> Table(const std::string& name, bool sparse) const;

  std::unique_ptr<worker::Client> client_;
};

}  // namespace osprey::bench
