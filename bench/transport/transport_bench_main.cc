// osprey-bench-transport: push, pull and push+pull through a real osprey server in another
// process, over tcp:// and ipc:// loopback, next to a bare ZeroMQ DEALER/ROUTER echo of the same
// sizes (bench/transport_raw) measured in the same run as the ceiling.
//
//   osprey-bench-transport [--json PATH] [--runs N] [--quick] [--transport tcp ipc | rdma]
//                          [--dense-sizes BYTES...] [--dense-only | --pipelined-only | --sparse-only]
//                          [--push-part-bytes BYTES] [--server-apply-threads T]
//                          [--sparse-ops OP...] [--sparse-keys KEYSxDIM...]
//
// Cases: dense 4 KiB, 64 KiB, 1 MiB, 16 MiB, 64 MiB (push, pull, push+pull, pull into a Buffer);
// 16 pipelined 4 KiB pushes; sparse 100k and 1M keys x dim 16 and 1M keys x dim 1 with the SGD
// step applied on the server (push, pull, push+pull, push and pull with bf16 rows, and 3 threads
// pulling at once). Each figure is the median of --runs runs (default 5) of >= 60 ms each; dense runs
// alternate with the raw baseline's (RunDenseSize). What one operation is and how it is timed:
// osprey_cases.h; the table and JSON fields: bench_report.h.
// --quick: dense 4 KiB and 1 MiB, pipelined, sparse 100k x 16; 3 runs of >= 20 ms (a smoke test).
// --dense-sizes replaces the plan's dense sizes; --dense-only skips the pipelined and sparse cases
// (to compare builds on a few dense sizes quickly); --pipelined-only runs the pipelined case alone,
// --sparse-only the sparse cases alone. --sparse-ops keeps the named sparse operations (push, pull,
// pushpull, push_bf16, pull_bf16, push_buffers, pull_x3) and --sparse-keys replaces the shapes
// (e.g. 100000x16): one case alone, to profile it.
//
// --transport rdma (builds with libibverbs): the RdmaTransport on the loopback verbs test double,
// CPU cost per message next to ZeroMQ ipc and in-process -- not network speed (rdma_loopback_bench.h).
// Process layout: the servers (one per transport) are forked first, while this process has one
// thread. Every Osprey client is destroyed again before the raw baseline runs, because the
// baseline forks its own echo server and must do so thread-free too.
// Exit codes: 0 fine, 1 a case failed (servers are killed and reaped on the way out), 2 usage.
#include <CLI/CLI.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/transport/bench_report.h"
#include "bench/transport/osprey_cases.h"
#include "bench/transport/server_process.h"
#include "common/zmq_curve.h"
#include "bench/transport_raw/raw_zmq_bench.h"
#include "common/malloc_tuning.h"
#if OSPREY_HAVE_RDMA
#include "bench/transport/rdma_loopback_bench.h"
#endif

namespace osprey::bench {
namespace {

struct SparseCase {
  size_t keys;
  int dim;
};

struct Plan {
  std::vector<size_t> dense_bytes;
  size_t pipelined_bytes = 4096;
  int window = 16;
  std::vector<SparseCase> sparse;
  bool dense_only = false;
  bool pipelined_only = false;
  bool sparse_only = false;
  std::vector<std::string> sparse_ops;  // empty: all of them
  ClientTuning parts{1 << 20, 1 << 20, true};  // the job defaults (client.push_part_bytes, pull_part_bytes)
  TimingOptions timing;
};

Plan FullPlan() {
  Plan p;
  p.dense_bytes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};
  p.sparse = {{100000, 16}, {1000000, 16}, {1000000, 1}};
  p.timing.runs = 5;
  p.timing.min_run_s = 0.06;
  return p;
}

Plan QuickPlan() {
  Plan p;
  p.dense_bytes = {4 << 10, 1 << 20};
  p.sparse = {{100000, 16}};
  p.timing.runs = 3;
  p.timing.min_run_s = 0.02;
  return p;
}

std::string DenseName(size_t bytes) { return "dense_" + std::to_string(bytes); }
std::string SparseName(int dim) { return "sparse_d" + std::to_string(dim); }

config::TableConfig BenchTable(const std::string& name, config::TableType type) {
  config::TableConfig t;
  t.name = name;
  t.type = type;
  t.optimizer.lr = 1e-9f;  // a real SGD step that leaves the weights where they are
  return t;
}

// One dense table per size (chunks of the default 2 MiB) and one sparse table per dim of the plan.
std::vector<config::TableConfig> BenchTables(const Plan& plan) {
  std::vector<size_t> sizes = plan.dense_bytes;
  sizes.push_back(plan.pipelined_bytes);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::vector<config::TableConfig> tables;
  for (size_t bytes : sizes) {
    config::TableConfig t = BenchTable(DenseName(bytes), config::TableType::kDense);
    t.size = bytes / sizeof(float);
    t.chunk_floats = std::min<uint64_t>(t.size, config::TableConfig().chunk_floats);
    tables.push_back(t);
  }
  std::vector<int> dims;
  for (const SparseCase& c : plan.sparse) {
    if (std::find(dims.begin(), dims.end(), c.dim) != dims.end()) continue;
    dims.push_back(c.dim);
    config::TableConfig t = BenchTable(SparseName(c.dim), config::TableType::kSparse);
    t.dim = c.dim;
    tables.push_back(t);
  }
  return tables;
}

void Progress(const BenchRecord& r) {
  std::fprintf(stderr, "  [%s] %-7s %-14s bytes=%-9llu %10.1f us\n", r.transport.c_str(),
               r.kind.c_str(), r.op.c_str(), static_cast<unsigned long long>(r.bytes),
               r.median_us);
}

// The raw baseline with `iters` operations per run (the Osprey run's count, so both do the same
// work). Fails when a thread is left in this process: the baseline forks.
StatusOr<RawZmqResult> RunRaw(const std::string& transport, size_t bytes, EchoShape shape,
                              int window, int iters, int runs) {
  OSPREY_RETURN_IF_ERROR(AwaitSingleThreaded("raw baseline"));
  EchoBenchConfig c;
  c.transport = transport;
  c.bytes = bytes;
  c.shape = shape;
  c.window = window;
  c.iters = iters;
  c.runs = runs;
  c.warmup = std::clamp(iters / 10, 2, 20) * window;
  return RunRawZmqBench(c);
}

// Dense cases run as `runs` interleaved rounds: each round times every Osprey op once (one run,
// on a fresh client) and then the raw baseline once with the same number of operations, so a
// burst of load from the machine's other tenants hits both sides of a ratio alike. The client
// is destroyed before the raw half of each round: the baseline forks its echo server.
Status RunDenseSize(const std::string& tr, const ServerProcess& server, const Plan& plan,
                    size_t bytes, std::vector<BenchRecord>* out) {
  const BenchOp ops[4] = {BenchOp::kPush, BenchOp::kPull, BenchOp::kPushPull,
                          BenchOp::kPullBuffer};
  std::vector<double> osprey_s[4], raw_s[2], osprey_cpu[4], raw_cpu[2];
  TimingOptions one = plan.timing;
  one.runs = 1;
  for (int run = 0; run < plan.timing.runs; ++run) {
    int iters[2] = {0, 0};  // push, pull operations of this round, reused by the raw baseline
    {
      OSPREY_ASSIGN_OR_RETURN(auto bench, OspreyBench::Connect(server.shard_map(), server.client_options(),
                                                              plan.parts));
      for (int i = 0; i < 4; ++i) {
        OSPREY_ASSIGN_OR_RETURN(OpTiming t, bench->Dense(DenseName(bytes), ops[i], one));
        osprey_s[i].push_back(t.median_s);
        osprey_cpu[i].push_back(t.cpu_s);
        if (i < 2) iters[i] = t.iters;
      }
    }
    for (int i = 0; i < 2; ++i) {
      EchoShape shape = i == 0 ? EchoShape::kPush : EchoShape::kPull;
      OSPREY_ASSIGN_OR_RETURN(RawZmqResult raw, RunRaw(tr, bytes, shape, 1, iters[i], 1));
      raw_s[i].push_back(raw.median_us * 1e-6);
      raw_cpu[i].push_back(raw.cpu_us * 1e-6);
    }
  }
  for (int i = 0; i < 4; ++i) {
    out->push_back(MakeRecord("dense", tr, ops[i], bytes, {}, {}, Median(osprey_s[i]), 1,
                              Median(osprey_cpu[i])));
    Progress(out->back());
  }
  for (int i = 0; i < 2; ++i) {
    out->push_back(MakeRecord("raw_zmq", tr, ops[i], bytes, {}, {}, Median(raw_s[i]), 1,
                              Median(raw_cpu[i])));
    Progress(out->back());
  }
  return Status::OK();
}

// Interleaved like the dense sizes; median_s is per batch of `window` requests.
Status RunPipelined(const std::string& tr, const ServerProcess& server, const Plan& plan,
                    std::vector<BenchRecord>* out) {
  const size_t bytes = plan.pipelined_bytes;
  const int w = plan.window;
  TimingOptions one = plan.timing;
  one.runs = 1;
  std::vector<double> osprey_s, raw_s, osprey_cpu, raw_cpu;
  for (int run = 0; run < plan.timing.runs; ++run) {
    OpTiming t;
    {
      OSPREY_ASSIGN_OR_RETURN(auto bench, OspreyBench::Connect(server.shard_map(), server.client_options(),
                                                              plan.parts));
      OSPREY_ASSIGN_OR_RETURN(t, bench->PipelinedPush(DenseName(bytes), w, one));
    }
    osprey_s.push_back(t.median_s);
    osprey_cpu.push_back(t.cpu_s);
    OSPREY_ASSIGN_OR_RETURN(RawZmqResult raw,
                            RunRaw(tr, bytes, EchoShape::kPush, w, t.iters * w, 1));
    raw_s.push_back(raw.median_us * 1e-6 * w);
    raw_cpu.push_back(raw.cpu_us * 1e-6 * w);  // per request -> per window, like raw_s
  }
  out->push_back(MakeRecord("dense", tr, BenchOp::kPipelinedPush, bytes, {}, {}, Median(osprey_s), w,
                            Median(osprey_cpu)));
  Progress(out->back());
  out->push_back(MakeRecord("raw_zmq", tr, BenchOp::kPipelinedPush, bytes, {}, {}, Median(raw_s), w,
                            Median(raw_cpu)));
  Progress(out->back());
  return Status::OK();
}

bool Wanted(const Plan& plan, BenchOp op) {
  return plan.sparse_ops.empty() || std::find(plan.sparse_ops.begin(), plan.sparse_ops.end(),
                                              BenchOpName(op)) != plan.sparse_ops.end();
}

// "100000x16" -> {100000, 16}; false when it is not KEYSxDIM with both positive.
bool ParseSparseCase(const std::string& text, SparseCase* c) {
  unsigned long long keys = 0;
  int dim = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%llux%d%c", &keys, &dim, &tail) != 2 || keys == 0 || dim <= 0) {
    return false;
  }
  *c = {static_cast<size_t>(keys), dim};
  return true;
}

Status RunSparse(const std::string& tr, const ServerProcess& server, const Plan& plan,
                 std::vector<BenchRecord>* out) {
  OSPREY_ASSIGN_OR_RETURN(auto bench, OspreyBench::Connect(server.shard_map(), server.client_options(),
                                                              plan.parts));
  for (const SparseCase& c : plan.sparse) {
    const uint64_t seed = 0x5eed0000 + c.keys + c.dim;  // fixed: the same keys every run
    const uint64_t bytes = c.keys * (sizeof(uint64_t) + c.dim * sizeof(float));
    for (BenchOp op : {BenchOp::kPush, BenchOp::kPull, BenchOp::kPushPull, BenchOp::kPushBf16, BenchOp::kPullBf16,
                       BenchOp::kPushBuffers}) {
      if (!Wanted(plan, op)) continue;
      OSPREY_ASSIGN_OR_RETURN(OpTiming t,
                              bench->Sparse(SparseName(c.dim), c.keys, seed, op, plan.timing));
      const bool bf16 = op == BenchOp::kPushBf16 || op == BenchOp::kPullBf16;
      const uint64_t moved = bf16 ? c.keys * (sizeof(uint64_t) + c.dim * sizeof(uint16_t)) : bytes;
      out->push_back(MakeRecord("sparse", tr, op, moved, c.keys, c.dim, t.median_s, 1, t.cpu_s));
      Progress(out->back());
    }
    if (!Wanted(plan, BenchOp::kThreadedPull)) continue;
    OSPREY_ASSIGN_OR_RETURN(OpTiming t,
                            bench->ThreadedSparsePull(SparseName(c.dim), c.keys, seed, plan.timing));
    out->push_back(MakeRecord("sparse", tr, BenchOp::kThreadedPull, bytes, c.keys, c.dim, t.median_s,
                              kPullThreads, t.cpu_s));
    Progress(out->back());
  }
  return Status::OK();
}

Status RunTransport(const std::string& tr, const ServerProcess& server, Plan plan,
                    std::vector<BenchRecord>* out) {
  std::fprintf(stderr, "%s: server %s\n", tr.c_str(), server.endpoint().c_str());
  // Every Osprey figure is charged the CPU of both processes (the client's threads and ZeroMQ's
  // in this one, the server's whole process), like the raw baseline's cpu_us.
  plan.timing.cpu_seconds = [&server] { return SelfCpuSeconds() + server.CpuSeconds(); };
  if (plan.pipelined_only) return RunPipelined(tr, server, plan, out);
  if (plan.sparse_only) return RunSparse(tr, server, plan, out);
  for (size_t bytes : plan.dense_bytes) {
    OSPREY_RETURN_IF_ERROR(RunDenseSize(tr, server, plan, bytes, out));
  }
  if (plan.dense_only) return Status::OK();
  OSPREY_RETURN_IF_ERROR(RunPipelined(tr, server, plan, out));
  return RunSparse(tr, server, plan, out);
}

int Main(int argc, char** argv) {
  TuneMallocForLargeMessages();  // before any thread; the forked servers inherit it
  CLI::App app{"osprey-bench-transport: Osprey push/pull vs raw ZeroMQ over tcp and ipc"};
  std::string json_path;
  int runs = 0;
  bool quick = false;
  bool dense_only = false;
  bool sparse_only = false;
  bool pipelined_only = false;
  std::vector<size_t> dense_sizes;
  std::vector<std::string> transports = {"tcp", "ipc"};
  app.add_option("--json", json_path, "also write the results as a JSON array to PATH");
  app.add_option("--runs", runs, "timed runs per case; the median is reported (default 5, "
                                 "--quick 3)")->check(CLI::PositiveNumber);
  app.add_flag("--quick", quick, "a small subset with 3 runs (smoke test, well under a minute)");
  app.add_option("--dense-sizes", dense_sizes, "dense sizes in bytes (multiples of 4), replacing "
                                               "the plan's")
      ->check(CLI::PositiveNumber);
  app.add_flag("--dense-only", dense_only, "only the dense cases (no pipelined or sparse ones)");
  app.add_flag("--pipelined-only", pipelined_only, "only the pipelined 4 KiB pushes")
      ->excludes("--dense-only");
  size_t push_part_bytes = 1 << 20, pull_part_bytes = 1 << 20;
  // The job config's bounds (client.push_part_bytes / pull_part_bytes); a negative value would
  // otherwise wrap to a huge size_t and silently turn parts off.
  const auto part_range = CLI::Range(uint64_t{0}, uint64_t{1} << 30);
  app.add_option("--push-part-bytes", push_part_bytes, "the client's push_part_bytes: pushes of at least "
                 "twice this go in parts (default 1 MiB, the job default; 0: never)")
      ->check(part_range);
  app.add_option("--pull-part-bytes", pull_part_bytes, "the client's pull_part_bytes: pulls whose reply "
                 "has at least twice this go in parts (default 1 MiB, the job default; 0: never)")
      ->check(part_range);
  bool no_receive_in_wait = false;
  app.add_flag("--no-receive-in-wait", no_receive_in_wait, "the client's receive_in_wait off: every reply is "
               "taken by its I/O thread, which wakes the waiting thread");
  int server_apply_threads = 1;
  app.add_option("--server-apply-threads", server_apply_threads, "the server's "
                 "cluster.server_apply_threads (default 1)")
      ->check(CLI::Range(1, 64));
  app.add_flag("--sparse-only", sparse_only, "only the sparse cases")
      ->excludes("--dense-only")
      ->excludes("--pipelined-only");
  std::vector<std::string> sparse_ops, sparse_keys;
  app.add_option("--sparse-ops", sparse_ops, "only these sparse operations")
      ->check(CLI::IsMember({"push", "pull", "pushpull", "push_bf16", "pull_bf16", "push_buffers",
                             "pull_x3"}));
  app.add_option("--sparse-keys", sparse_keys, "sparse shapes KEYSxDIM (e.g. 100000x16), replacing "
                                               "the plan's");
  app.add_option("--transport", transports, "tcp and/or ipc; or rdma (loopback verbs, CPU cost only)")
      ->check(CLI::IsMember({"tcp", "ipc", "rdma"}));
  std::string security = "none";
  app.add_option("--security", security, "none, or curve: Osprey's sockets CURVE-encrypted "
                                          "(fresh keys; the raw ZeroMQ baseline stays plain)")
      ->check(CLI::IsMember({"none", "curve"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (std::find(transports.begin(), transports.end(), "rdma") != transports.end()) {
#if OSPREY_HAVE_RDMA
    Status s = RunRdmaLoopbackBench(runs > 0 ? runs : (quick ? 3 : 5), quick, json_path);
    if (!s.ok()) std::fprintf(stderr, "osprey-bench-transport: rdma: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
#else
    std::fprintf(stderr, "osprey-bench-transport: this build has no RDMA (libibverbs-dev and "
                         "librdmacm-dev were not found)\n");
    return 2;
#endif
  }
  Plan plan = quick ? QuickPlan() : FullPlan();
  if (runs > 0) plan.timing.runs = runs;
  for (size_t bytes : dense_sizes) {
    if (bytes % sizeof(float) != 0) {
      std::fprintf(stderr, "osprey-bench-transport: --dense-sizes %zu is not a multiple of 4\n",
                   bytes);
      return 2;
    }
  }
  if (!dense_sizes.empty()) plan.dense_bytes = dense_sizes;
  if (!sparse_keys.empty()) plan.sparse.clear();
  for (const std::string& text : sparse_keys) {
    SparseCase c;
    if (!ParseSparseCase(text, &c)) {
      std::fprintf(stderr, "osprey-bench-transport: --sparse-keys '%s' is not KEYSxDIM with both "
                           "positive (e.g. 100000x16)\n", text.c_str());
      return 2;
    }
    plan.sparse.push_back(c);
  }
  plan.sparse_ops = sparse_ops;
  plan.dense_only = dense_only;
  plan.pipelined_only = pipelined_only;
  plan.sparse_only = sparse_only;
  plan.parts = {push_part_bytes, pull_part_bytes, !no_receive_in_wait};
  const std::vector<config::TableConfig> tables = BenchTables(plan);

  std::string keys_dir;
  if (security == "curve") {
    char tmpl[] = "/tmp/osprey-bench-keys-XXXXXX";
    Status made = ::mkdtemp(tmpl) != nullptr ? WriteCurveKeys(tmpl, /*force=*/true)
                                             : Unavailable("mkdtemp failed");
    if (!made.ok()) {
      std::fprintf(stderr, "osprey-bench-transport: %s\n", made.ToString().c_str());
      return 1;
    }
    keys_dir = tmpl;
  }
  // Every server is forked now, while this process is still single-threaded.
  std::vector<std::unique_ptr<ServerProcess>> servers;
  for (const std::string& tr : transports) {
    auto sp = ServerProcess::Start(tr, tables, keys_dir, server_apply_threads);
    if (!sp.ok()) {
      std::fprintf(stderr, "osprey-bench-transport: %s server: %s\n", tr.c_str(),
                   sp.status().ToString().c_str());
      return 1;
    }
    servers.push_back(std::move(*sp));
  }
  std::vector<BenchRecord> records;
  for (size_t i = 0; i < transports.size(); ++i) {
    Status s = RunTransport(transports[i], *servers[i], plan, &records);
    if (!s.ok()) {
      std::fprintf(stderr, "osprey-bench-transport: %s: %s\n", transports[i].c_str(),
                   s.ToString().c_str());
      return 1;
    }
  }
  servers.clear();
  if (!keys_dir.empty()) std::filesystem::remove_all(keys_dir);
  std::printf("osprey-bench-transport: security %s (Osprey cases); server in a child process, 1 "
              "server, malloc tuning on; ", security.c_str());
  std::printf("median of %d runs of >= %.0f ms (dense: Osprey and raw runs interleaved)\n"
              "vs raw = raw ZeroMQ time / Osprey time (throughput ratio; pushpull vs raw push + "
              "raw pull)\n",
              plan.timing.runs, plan.timing.min_run_s * 1e3);
  PrintTable(stdout, records);
  if (!json_path.empty()) {
    Status s = WriteJson(json_path, records);
    if (!s.ok()) {
      std::fprintf(stderr, "osprey-bench-transport: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace osprey::bench

int main(int argc, char** argv) { return osprey::bench::Main(argc, argv); }
