#include "bench/transport/rdma_loopback_bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <vector>

#include "common/inproc_transport.h"
#include "common/rdma/loopback_verbs_for_testing.h"
#include "common/rdma/rdma_transport.h"
#include "common/zmq_transport.h"

namespace osprey::bench {
namespace {

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Pair {
  std::unique_ptr<Transport> server, client;
  std::string listen;
};

StatusOr<Pair> MakePair(const std::string& kind) {
  Pair p;
  if (kind == "rdma-loopback") {
    auto fabric = std::make_shared<rdma::LoopbackFabricForTesting>();
    p.server = std::make_unique<rdma::RdmaTransport>(rdma::RdmaOptions{}, fabric->NewVerbs());
    p.client = std::make_unique<rdma::RdmaTransport>(rdma::RdmaOptions{}, fabric->NewVerbs());
    p.listen = "rdma://127.0.0.1:0";
  } else if (kind == "zmq-ipc") {
    p.server = std::make_unique<ZmqTransport>(TransportOptions{});
    p.client = std::make_unique<ZmqTransport>(TransportOptions{});
    p.listen = "ipc:///tmp/osprey-bench-rdma-" + std::to_string(::getpid());
  } else {
    auto hub = std::make_shared<InprocHub>();
    p.server = std::make_unique<InprocTransport>(hub);
    p.client = std::make_unique<InprocTransport>(hub);
    p.listen = "inproc://bench";
  }
  return p;
}

struct Result {
  std::string kind;
  size_t bytes;
  double cpu_us, wall_us;  // per message (a round trip is two)
};

// `iters` round trips of a `bytes` values frame, echoed by the server; per-message medians.
StatusOr<Result> Measure(const std::string& kind, size_t bytes, int iters, int runs) {
  OSPREY_ASSIGN_OR_RETURN(Pair p, MakePair(kind));
  Transport* s = p.server.get();
  OSPREY_ASSIGN_OR_RETURN(std::string ep, s->Listen(p.listen));
  s->SetHandler([s](Message&& m) { (void)s->Send(std::move(m)); });
  OSPREY_RETURN_IF_ERROR(s->Start());
  std::mutex mu;
  std::condition_variable cv;
  int got = 0;  // guarded by mu; the waiter sleeps (its CPU is not counted as spinning)
  p.client->SetHandler([&](Message&&) {
    std::lock_guard<std::mutex> lock(mu);
    got++;
    cv.notify_all();
  });
  OSPREY_ASSIGN_OR_RETURN(PeerId peer, p.client->Connect(ep));
  OSPREY_RETURN_IF_ERROR(p.client->Start());
  Buffer header = Buffer::Copy("bench-hdr-0123456789", 20), keys = Buffer::Allocate(64);
  Buffer values = Buffer::Allocate(bytes);
  std::fill(values.mutable_data(), values.mutable_data() + bytes, 7);
  auto round_trip = [&]() -> Status {
    int want;
    {
      std::lock_guard<std::mutex> lock(mu);
      want = got + 1;
    }
    Message m;
    m.peer = peer;
    m.header = header;
    m.keys = keys;
    m.values = values;
    OSPREY_RETURN_IF_ERROR(p.client->Send(std::move(m)));
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return got >= want; })) {
      return DeadlineExceeded(kind + ": no echo within 10 s");
    }
    return Status::OK();
  };
  for (int i = 0; i < 20; ++i) OSPREY_RETURN_IF_ERROR(round_trip());  // connect and warm up
  std::vector<double> cpu, wall;
  for (int r = 0; r < runs; ++r) {
    double c0 = CpuSeconds();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) OSPREY_RETURN_IF_ERROR(round_trip());
    double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu.push_back((CpuSeconds() - c0) / (2.0 * iters) * 1e6);
    wall.push_back(w / (2.0 * iters) * 1e6);
  }
  p.client->Stop();
  p.server->Stop();
  if (kind == "zmq-ipc") ::unlink(p.listen.c_str() + 6);
  std::sort(cpu.begin(), cpu.end());
  std::sort(wall.begin(), wall.end());
  return Result{kind, bytes, cpu[cpu.size() / 2], wall[wall.size() / 2]};
}

}  // namespace

Status RunRdmaLoopbackBench(int runs, bool quick, const std::string& json_path) {
  std::vector<size_t> sizes = quick ? std::vector<size_t>{64, 1 << 20}
                                    : std::vector<size_t>{64, 4 << 10, 64 << 10, 1 << 20};
  std::vector<Result> results;
  for (size_t bytes : sizes) {
    int iters = bytes >= (1 << 20) ? 200 : 2000;
    if (quick) iters /= 4;
    for (const char* kind : {"rdma-loopback", "zmq-ipc", "inproc"}) {
      OSPREY_ASSIGN_OR_RETURN(Result r, Measure(kind, bytes, iters, runs));
      std::fprintf(stderr, "  [%s] %8zu B  cpu %8.2f us/msg  wall %8.2f us/msg\n", kind, bytes,
                   r.cpu_us, r.wall_us);
      results.push_back(r);
    }
  }
  std::printf("osprey-bench-transport --transport rdma: NO RDMA HARDWARE MEASURED. RdmaTransport "
              "over the loopback verbs test double (memcpy between registered regions), both ends "
              "in this process, next to ZmqTransport over ipc:// and InprocTransport. CPU = process "
              "user+sys time per message (both ends, incl. spinning pollers); median of %d runs. "
              "This is the protocol's CPU cost, not network speed.\n", runs);
  std::printf("%-14s %10s %14s %14s\n", "transport", "bytes", "cpu us/msg", "wall us/msg");
  for (const Result& r : results) {
    std::printf("%-14s %10zu %14.2f %14.2f\n", r.kind.c_str(), r.bytes, r.cpu_us, r.wall_us);
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "[\n";
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      f << "  {\"case\": \"rdma_loopback_cpu\", \"transport\": \"" << r.kind << "\", \"bytes\": "
        << r.bytes << ", \"cpu_us_per_msg\": " << r.cpu_us << ", \"wall_us_per_msg\": " << r.wall_us
        << ", \"runs\": " << runs << ", \"note\": \"no RDMA hardware: loopback test double\"}"
        << (i + 1 < results.size() ? ",\n" : "\n");
    }
    f << "]\n";
    if (!f) return Unavailable("cannot write " + json_path);
  }
  return Status::OK();
}

}  // namespace osprey::bench
