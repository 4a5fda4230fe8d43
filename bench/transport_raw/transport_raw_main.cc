// osprey_bench_transport_raw: raw ZeroMQ vs Osprey's ZmqTransport on the same echo benchmark.
//
// Prints, per case: size, shape, window, and for raw ZeroMQ, the transport driven from the caller
// thread, and the transport driven from its handler: median time per operation, throughput, and
// the transport's ratio to raw. Each case runs `--reps` times (default 3) with the three variants
// interleaved, and reports the median, so drift on a noisy VM hits all of them alike.
//
// Flags: --quick (fewer iterations), --transport tcp|ipc (default both), --reps N,
//        --min-bytes N, --max-bytes N (which cases),
//        --no-malloc-tuning, --no-single-arena (tuning without M_ARENA_MAX=1), --in-process.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/transport_raw/raw_zmq_bench.h"
#include "bench/transport_raw/transport_echo_bench.h"
#include "common/malloc_tuning.h"
#include "common/stats.h"

namespace osprey::bench {
namespace {

struct Case {
  size_t bytes;
  EchoShape shape;
  int iters;
  int window;
};

std::string SizeName(size_t b) {
  if (b >= (1 << 20)) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

struct Summary {
  double us;      // median over reps of the median time per operation
  double cpu_us;  // median over reps of CPU per operation
};

Summary Summarize(const std::vector<RawZmqResult>& reps) {
  std::vector<double> us, cpu;
  for (const RawZmqResult& r : reps) {
    us.push_back(r.median_us);
    cpu.push_back(r.cpu_us);
  }
  return {Median(us), Median(cpu)};
}

// "time GB/s cpu" for one operation at a time, "msg/s cpu" when pipelined.
std::string Cell(const Case& k, const Summary& s) {
  char buf[96];
  if (k.window > 1) {
    std::snprintf(buf, sizeof(buf), "%9.0f msg/s %6.1f", 1e6 / s.us, s.cpu_us);
  } else {
    std::snprintf(buf, sizeof(buf), "%9.1f %5.2f %6.1f", s.us, k.bytes / s.us / 1e3, s.cpu_us);
  }
  return buf;
}

int Main(int argc, char** argv) {
  bool quick = false, tune = true, single_arena = true, in_process = false;
  int reps = 3;
  size_t min_bytes = 0, max_bytes = SIZE_MAX;
  std::vector<std::string> transports = {"tcp", "ipc"};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--no-malloc-tuning") tune = false;
    else if (a == "--no-single-arena") single_arena = false;
    else if (a == "--in-process") in_process = true;
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--transport" && i + 1 < argc) transports = {argv[++i]};
    else if (a == "--min-bytes" && i + 1 < argc) min_bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--max-bytes" && i + 1 < argc) max_bytes = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (tune && single_arena) TuneMallocForLargeMessages();
  if (tune && !single_arena) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  const int q = quick ? 4 : 1;
  const std::vector<Case> cases = {
      {4096, EchoShape::kPush, 2000 / q, 1},      {1 << 20, EchoShape::kPush, 200 / q, 1},
      {1 << 20, EchoShape::kPull, 200 / q, 1},    {16 << 20, EchoShape::kPush, 24 / q, 1},
      {16 << 20, EchoShape::kPull, 24 / q, 1},    {64 << 20, EchoShape::kPush, 8 / q, 1},
      {64 << 20, EchoShape::kPull, 8 / q, 1},     {4096, EchoShape::kPush, 20000 / q, 16}};
  std::printf("malloc tuning: %s; server: %s; median of %d reps x 5 runs\n",
              !tune ? "off" : single_arena ? "on" : "on, without single arena",
              in_process ? "thread" : "child process", reps);
  std::printf("per variant: median us/op, GB/s (or msg/s), CPU us/op (client+server); "
              "'vs raw' = throughput ratio\n");
  std::printf("%-4s %-7s %-4s %3s | %-22s | %-22s %6s | %-22s %6s\n", "tr", "size", "op", "win",
              "raw zmq", "osprey (caller thread)", "vs raw", "osprey (handler)", "vs raw");
  TransportOptions options;
  for (const std::string& tr : transports) {
    for (const Case& k : cases) {
      if (k.bytes < min_bytes || k.bytes > max_bytes) continue;
      EchoBenchConfig c;
      c.transport = tr;
      c.bytes = k.bytes;
      c.shape = k.shape;
      c.iters = k.iters;
      c.window = k.window;
      c.runs = 5;
      c.warmup = k.iters / 10 + 2;
      c.server_in_child_process = !in_process;
      std::vector<RawZmqResult> raw, caller, handler;
      for (int r = 0; r < reps; ++r) {
        auto a = RunRawZmqBench(c);
        auto b = RunTransportEchoBench(c, options, EchoDriver::kCallerThread);
        auto d = RunTransportEchoBench(c, options, EchoDriver::kHandler);
        for (const auto* x : {&a, &b, &d}) {
          if (!x->ok()) {
            std::fprintf(stderr, "%s\n", x->status().ToString().c_str());
            return 1;
          }
        }
        raw.push_back(*a);
        caller.push_back(*b);
        handler.push_back(*d);
      }
      Summary r = Summarize(raw), cu = Summarize(caller), hu = Summarize(handler);
      // "vs raw" is a throughput ratio: above 100% means faster than raw ZeroMQ.
      std::printf("%-4s %-7s %-4s %3d | %-22s | %-22s %5.0f%% | %-22s %5.0f%%\n", tr.c_str(),
                  SizeName(k.bytes).c_str(), k.shape == EchoShape::kPush ? "push" : "pull",
                  k.window, Cell(k, r).c_str(), Cell(k, cu).c_str(), 100 * r.us / cu.us,
                  Cell(k, hu).c_str(), 100 * r.us / hu.us);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace osprey::bench

int main(int argc, char** argv) { return osprey::bench::Main(argc, argv); }
