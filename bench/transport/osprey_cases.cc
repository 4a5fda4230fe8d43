#include "bench/transport/osprey_cases.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "common/transport.h"

namespace osprey::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Gradients are small and finite: every push is a real, validated SGD step (lr 1e-9 on the
// server keeps the weights from drifting anywhere interesting).
constexpr float kGrad = 1e-3f;
// Bounds the warm-up of very fast operations.
constexpr int kMaxWarmupCalls = 100000;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Buffer GradBuffer(size_t floats) {
  Buffer b = Buffer::Allocate(floats * sizeof(float));
  float* p = reinterpret_cast<float*>(b.mutable_data());
  std::fill(p, p + floats, kGrad);
  return b;
}

// Times `push`, `pull` or one after the other, as `op` says.
StatusOr<OpTiming> TimePushPull(BenchOp op, const std::function<Status()>& push,
                                const std::function<Status()>& pull,
                                const TimingOptions& options) {
  switch (op) {
    case BenchOp::kPush:
      return TimeOp(push, options);
    case BenchOp::kPull:
      return TimeOp(pull, options);
    case BenchOp::kPushPull:
      return TimeOp([&]() -> Status {
        OSPREY_RETURN_IF_ERROR(push());
        return pull();
      }, options);
    default:
      return InvalidArgument(std::string("op ") + BenchOpName(op) + " is not push/pull/pushpull");
  }
}

}  // namespace

const char* BenchOpName(BenchOp op) {
  switch (op) {
    case BenchOp::kPush: return "push";
    case BenchOp::kPull: return "pull";
    case BenchOp::kPushPull: return "pushpull";
    case BenchOp::kPipelinedPush: return "pipelined_push";
    case BenchOp::kPullBuffer: return "pull_buffer";
    case BenchOp::kThreadedPull: return "pull_x3";
    case BenchOp::kPushBf16: return "push_bf16";
    case BenchOp::kPullBf16: return "pull_bf16";
    case BenchOp::kPushBuffers: return "push_buffers";
  }
  return "unknown";
}

StatusOr<OpTiming> TimeOp(const std::function<Status()>& op, const TimingOptions& options) {
  if (options.runs <= 0 || !(options.min_run_s > 0)) {
    return InvalidArgument("runs and min_run_s must be positive");
  }
  // The first call pays the first touches (buffers, rows, connection); it is not part of the
  // estimate below.
  OSPREY_RETURN_IF_ERROR(op());
  int calls = 0;
  double warm = 0;
  auto t0 = Clock::now();
  while (calls < 2 || (warm < options.min_run_s / 2 && calls < kMaxWarmupCalls)) {
    OSPREY_RETURN_IF_ERROR(op());
    ++calls;
    warm = SecondsSince(t0);
  }
  double per_call = warm / calls;
  int iters = static_cast<int>(std::clamp(std::ceil(options.min_run_s / per_call), 2.0, 1e6));
  std::vector<double> runs;
  const double cpu0 = options.cpu_seconds ? options.cpu_seconds() : 0;
  for (int r = 0; r < options.runs; ++r) {
    auto start = Clock::now();
    for (int i = 0; i < iters; ++i) OSPREY_RETURN_IF_ERROR(op());
    runs.push_back(SecondsSince(start));
  }
  OpTiming t{Median(std::move(runs)) / iters, iters};
  if (options.cpu_seconds) {
    t.cpu_s = (options.cpu_seconds() - cpu0) / (static_cast<double>(iters) * options.runs);
  }
  return t;
}

StatusOr<std::unique_ptr<OspreyBench>> OspreyBench::Connect(const proto::ShardMap& map,
                                                            const TransportOptions& transport_options,
                                                            ClientTuning parts) {
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, MakeTransport(transport_options));
  worker::ClientOptions options;
  options.timeout_ms = 60000;
  options.push_part_bytes = parts.push;
  options.pull_part_bytes = parts.pull;
  options.receive_in_wait = parts.receive_in_wait;
  auto client = std::make_unique<worker::Client>(options, std::move(transport), map);
  OSPREY_RETURN_IF_ERROR(client->Start());
  return std::unique_ptr<OspreyBench>(new OspreyBench(std::move(client)));
}

OspreyBench::~OspreyBench() { client_->Stop(); }

StatusOr<uint32_t> OspreyBench::Table(const std::string& name, bool sparse) const {
  OSPREY_ASSIGN_OR_RETURN(uint32_t id, client_->TableId(name));
  bool is_sparse = client_->shard_map().tables(id).type() == proto::TABLE_SPARSE;
  if (is_sparse != sparse) {
    return InvalidArgument("bench table '" + name + "' is not " + (sparse ? "sparse" : "dense"));
  }
  return id;
}

StatusOr<OpTiming> OspreyBench::Dense(const std::string& table_name, BenchOp op,
                                      const TimingOptions& options) {
  OSPREY_ASSIGN_OR_RETURN(uint32_t id, Table(table_name, /*sparse=*/false));
  size_t floats = client_->shard_map().tables(id).size();
  // Allocated once: every push sends slices of the same Buffer (zero-copy above the transport's
  // threshold), every pull lands in the same, already faulted-in vector.
  Buffer grads = GradBuffer(floats);
  std::vector<float> out(floats);
  worker::Client* c = client_.get();
  auto push = [&] { return c->Wait(c->PushDense(id, grads)); };
  auto pull = [&] { return c->Wait(c->PullDense(id, out.data())); };
  if (op == BenchOp::kPullBuffer) {
    Buffer pulled;
    return TimeOp([&] { return c->Wait(c->PullDense(id, &pulled)); }, options);
  }
  return TimePushPull(op, push, pull, options);
}

StatusOr<OpTiming> OspreyBench::PipelinedPush(const std::string& table_name, int window,
                                              const TimingOptions& options) {
  OSPREY_ASSIGN_OR_RETURN(uint32_t id, Table(table_name, /*sparse=*/false));
  if (window <= 0) return InvalidArgument("pipelined push window must be positive");
  Buffer grads = GradBuffer(client_->shard_map().tables(id).size());
  std::vector<worker::Ticket> tickets(window);
  worker::Client* c = client_.get();
  return TimeOp([&] {
    for (worker::Ticket& t : tickets) t = c->PushDense(id, grads);
    return c->WaitAll(tickets);
  }, options);
}

StatusOr<OpTiming> OspreyBench::Sparse(const std::string& table_name, size_t num_keys,
                                       uint64_t seed, BenchOp op, const TimingOptions& options) {
  OSPREY_ASSIGN_OR_RETURN(uint32_t id, Table(table_name, /*sparse=*/true));
  size_t dim = client_->shard_map().tables(id).dim();
  std::vector<uint64_t> keys(num_keys);
  std::mt19937_64 rng(seed);
  for (uint64_t& k : keys) k = rng();
  std::vector<float> grads(num_keys * dim, kGrad);
  std::vector<float> out(num_keys * dim);
  worker::Client* c = client_.get();
  // Pushes carry the newest version a reply reported, as a worker's gradient of the rows it just
  // pulled does; version 0 would make every push look maximally stale to the server.
  auto push = [&] {
    return c->Wait(c->Push(id, keys.data(), num_keys, grads.data(), /*clock=*/0, c->version(id)));
  };
  auto pull = [&] { return c->Wait(c->Pull(id, keys.data(), num_keys, out.data())); };
  // Creates the rows, so no timed call (warm-up included) pays row creation.
  OSPREY_RETURN_IF_ERROR(pull());
  if (op == BenchOp::kPushBuffers) {
    const Buffer key_buffer = Buffer::Copy(keys.data(), keys.size() * sizeof(uint64_t));
    const Buffer row_buffer = Buffer::Copy(grads.data(), grads.size() * sizeof(float));
    return TimeOp([&] { return c->Wait(c->Push(id, key_buffer, row_buffer, 0, c->version(id))); }, options);
  }
  if (op == BenchOp::kPushBf16 || op == BenchOp::kPullBf16) {
    const bool pushes = op == BenchOp::kPushBf16;
    OSPREY_RETURN_IF_ERROR(pushes ? c->SetEncoder(id, std::move(*worker::MakeRowCastEncoder(proto::CODEC_BF16)))
                                  : c->SetSparsePullCodec(id, proto::CODEC_BF16));
    StatusOr<OpTiming> t = pushes ? TimeOp(push, options) : TimeOp(pull, options);
    OSPREY_RETURN_IF_ERROR(pushes ? c->SetEncoder(id, nullptr) : c->SetSparsePullCodec(id, proto::CODEC_NONE));
    return t;
  }
  return TimePushPull(op, push, pull, options);
}

StatusOr<OpTiming> OspreyBench::ThreadedSparsePull(const std::string& table_name, size_t num_keys,
                                                   uint64_t seed, const TimingOptions& options) {
  OSPREY_ASSIGN_OR_RETURN(uint32_t id, Table(table_name, /*sparse=*/true));
  const size_t dim = client_->shard_map().tables(id).dim();
  std::vector<std::vector<uint64_t>> keys(kPullThreads, std::vector<uint64_t>(num_keys));
  std::vector<std::vector<float>> outs(kPullThreads, std::vector<float>(num_keys * dim));
  for (int t = 0; t < kPullThreads; ++t) {
    std::mt19937_64 rng(seed + t);
    for (uint64_t& k : keys[t]) k = rng();
  }
  worker::Client* c = client_.get();
  // The threads live for the whole case: one round = every thread does one pull.
  std::mutex mu;
  std::condition_variable cv;
  uint64_t round = 0;  // GUARDED_BY(mu)
  int done = 0;        // GUARDED_BY(mu)
  bool quit = false;   // GUARDED_BY(mu)
  Status first;        // GUARDED_BY(mu)
  std::vector<std::thread> threads;
  for (int t = 0; t < kPullThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t seen = 0;
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return quit || round != seen; });
          if (quit) return;
          seen = round;
        }
        Status s = c->Wait(c->Pull(id, keys[t].data(), num_keys, outs[t].data()));
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok() && !s.ok()) first = s;
        if (++done == kPullThreads) cv.notify_all();
      }
    });
  }
  auto op = [&]() -> Status {
    std::unique_lock<std::mutex> lock(mu);
    done = 0;
    ++round;
    cv.notify_all();
    cv.wait(lock, [&] { return done == kPullThreads; });
    return first;
  };
  StatusOr<OpTiming> timing = TimeOp(op, options);  // its first call creates the rows
  {
    std::lock_guard<std::mutex> lock(mu);
    quit = true;
  }
  cv.notify_all();
  for (std::thread& th : threads) th.join();
  return timing;
}

}  // namespace osprey::bench
