// osprey-bench-host-allreduce: the intra-host allreduce paths side by side, nccl-tests style
// (issue 19): for each message size, NCCL's ncclAllReduce and the CUDA IPC allreduce
// (worker/cuda/ipc) in the same run, time per call and bus bandwidth (busBw = bytes / time x
// 2 (n - 1) / n), the IPC/NCCL ratio, and what worker.host_allreduce: auto would pick from a
// calibration at 64 KiB x 4^k (worker/gpu/allreduce_choice.h) with its cost against the faster
// path at the sizes in between (sizes go up by 2x from --min-bytes). Each size's sum and mean
// are compared between the paths ("ulps s/m": the largest distance; two ranks must give 0 / <= 1).
//
// The ranks are real processes: this binary starts --ranks copies of itself (GPU rank % visible
// devices), which exchange the NCCL id and the IPC handles through files in a temporary
// directory. With fewer GPUs than ranks NCCL cannot run (it refuses two ranks on one GPU) and
// only IPC is timed, which then measures the GPU's time slicing between processes, not a link.
//
// Usage: osprey-bench-host-allreduce [--ranks N] [--min-bytes B] [--max-bytes B] [--runs R] [--blocks K]
//   Per size: median over --runs of the mean time of `iters` back-to-back calls (more calls for
//   small messages), after warm-up calls.
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/stats.h"
#include "worker/cuda/ipc/ipc_allreduce.h"
#include "worker/gpu/allreduce_choice.h"

namespace osprey::bench {
namespace {

using worker::gpu::AllreduceChoice;
using worker::gpu::AllreducePath;
using worker::gpu::AllreduceTiming;

struct Options {
  int ranks = 0;  // 0: the visible GPUs, at least 2
  size_t min_bytes = 4096, max_bytes = size_t{256} << 20;
  int runs = 3;
  int blocks = 0;  // IPC blocks per call (0: the library's default)
};

void Die(const std::string& what, int code = 1) {
  std::fprintf(stderr, "osprey-bench-host-allreduce: %s\n", what.c_str());
  std::exit(code);
}

// A bad flag: exit status 2, as every osprey binary uses for usage errors.
void Usage(const std::string& what) { Die(what, 2); }

#define BENCH_CUDA(x)                                                                       \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) Die(std::string(#x) + ": " + cudaGetErrorString(e_));           \
  } while (0)
#define BENCH_NCCL(x)                                                                       \
  do {                                                                                      \
    ncclResult_t r_ = (x);                                                                  \
    if (r_ != ncclSuccess) Die(std::string(#x) + ": " + ncclGetErrorString(r_));           \
  } while (0)

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void Publish(const std::string& path, const std::string& data) {
  std::ofstream(path + ".tmp", std::ios::binary) << data;
  std::rename((path + ".tmp").c_str(), path.c_str());
}

std::string Await(const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (::access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline) Die("no " + path + " within 120 s (a rank died?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ReadAll(path);
}

// Mean milliseconds per call of `iters` calls of `fn` on `s`, after 3 warm-ups.
template <typename Fn>
double MeanMs(Fn fn, cudaStream_t s, int iters) {
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn();
  BENCH_CUDA(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) fn();
  BENCH_CUDA(cudaEventRecord(b, s));
  BENCH_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
}

struct Row {
  size_t bytes;
  double nccl_us, ipc_us;  // nccl_us 0: not run
  uint32_t sum_ulps, mean_ulps;  // largest distance between the two paths' results
};

// Distance in ulps between two floats (0: the same bits; NaN or opposite signs: UINT32_MAX).
uint32_t UlpDistance(float x, float y) {
  int32_t a, b;
  std::memcpy(&a, &x, 4);
  std::memcpy(&b, &y, 4);
  if (a == b) return 0;
  if (x != x || y != y || (a < 0) != (b < 0)) return UINT32_MAX;
  return static_cast<uint32_t>(a > b ? a - b : b - a);
}

std::vector<size_t> Sizes(const Options& o) {
  std::vector<size_t> v;
  for (size_t b = o.min_bytes; b <= o.max_bytes; b *= 2) v.push_back(b);
  return v;
}

// One rank: both paths at every size; rank 0 writes the rows (binary) to DIR/rows.
int RunRank(int rank, int ranks, const std::string& dir, const Options& o) {
  int devices = 0;
  BENCH_CUDA(cudaGetDeviceCount(&devices));
  BENCH_CUDA(cudaSetDevice(rank % devices));
  const bool nccl = devices >= ranks;
  ncclComm_t comm = nullptr;
  if (nccl) {
    ncclUniqueId id;
    if (rank == 0) {
      BENCH_NCCL(ncclGetUniqueId(&id));
      Publish(dir + "/nccl_id", std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    }
    const std::string got = Await(dir + "/nccl_id");
    std::memcpy(&id, got.data(), sizeof(id));
    BENCH_NCCL(ncclCommInitRank(&comm, ranks, id, rank));
  }
  cuda::IpcAllreduceOptions io;
  io.max_bytes = o.max_bytes;
  io.blocks = o.blocks;
  auto ipc = cuda::IpcAllreduce::Create(rank, ranks, io);
  if (!ipc.ok()) Die(ipc.status().ToString());
  Publish(dir + "/handle." + std::to_string(rank), (*ipc)->handle());
  std::vector<std::string> handles;
  for (int r = 0; r < ranks; ++r) handles.push_back(Await(dir + "/handle." + std::to_string(r)));
  if (Status s = (*ipc)->Connect(handles); !s.ok()) Die(s.ToString());
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *a = nullptr, *b = nullptr;
  BENCH_CUDA(cudaMalloc(&a, o.max_bytes));
  BENCH_CUDA(cudaMalloc(&b, o.max_bytes));
  std::vector<float> h(o.max_bytes / 4);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>((i * 2654435761u + rank * 97u) % 1000) / 997.0f;
  std::vector<Row> rows;
  for (size_t bytes : Sizes(o)) {
    const size_t n = bytes / 4;
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / bytes, 5, 200));
    std::vector<double> tn, ti;
    for (int run = 0; run < o.runs; ++run) {
      if (nccl) {
        tn.push_back(MeanMs([&] { BENCH_NCCL(ncclAllReduce(a, a, n, ncclFloat, ncclSum, comm, s)); }, s, iters));
      }
      ti.push_back(MeanMs([&] {
        if (Status st = (*ipc)->AllReduce(b, n, false, s); !st.ok()) Die(st.ToString());
      }, s, iters));
    }
    if (Status st = (*ipc)->Check(s); !st.ok()) Die(st.ToString());
    // The same input through both paths once more, sum and mean, compared: the largest distance
    // in ulps (for two ranks the sum must be bit-exact and the mean within 1 ulp).
    uint32_t ulps[2] = {0, 0};
    for (int mean = 0; nccl && mean < 2; ++mean) {
      BENCH_CUDA(cudaMemcpy(a, h.data(), bytes, cudaMemcpyHostToDevice));
      BENCH_CUDA(cudaMemcpy(b, h.data(), bytes, cudaMemcpyHostToDevice));
      BENCH_NCCL(ncclAllReduce(a, a, n, ncclFloat, mean ? ncclAvg : ncclSum, comm, s));
      if (Status st = (*ipc)->AllReduce(b, n, mean == 1, s); !st.ok()) Die(st.ToString());
      if (Status st = (*ipc)->Check(s); !st.ok()) Die(st.ToString());
      std::vector<float> x(n), y(n);
      BENCH_CUDA(cudaMemcpy(x.data(), a, bytes, cudaMemcpyDeviceToHost));
      BENCH_CUDA(cudaMemcpy(y.data(), b, bytes, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < n; ++i) ulps[mean] = std::max(ulps[mean], UlpDistance(x[i], y[i]));
    }
    rows.push_back({bytes, nccl ? Median(tn) * 1e3 : 0, Median(ti) * 1e3, ulps[0], ulps[1]});
  }
  if (rank == 0) {
    Publish(dir + "/rows", std::string(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(Row)));
  }
  if (comm) ncclCommDestroy(comm);
  return 0;
}

// 64 KiB x 4^k: the sizes worker.host_allreduce: auto calibrates (CalibrationSizes); the sizes
// between them show what its nearest-size choice costs.
bool IsCalibrationSize(size_t bytes) {
  if (bytes < (size_t{64} << 10) || bytes % (size_t{64} << 10) != 0) return false;
  size_t q = bytes / (size_t{64} << 10);
  while (q % 4 == 0) q /= 4;
  return q == 1;
}

double BusGBps(size_t bytes, double us, int ranks) {
  return us > 0 ? bytes / (us * 1e3) * 2.0 * (ranks - 1) / ranks : 0;
}

void Print(const std::vector<Row>& rows, int ranks, int blocks) {
  std::printf("%d ranks, IPC blocks %s; time per call (us) and busBw (GB/s), median of the runs\n", ranks,
              blocks > 0 ? std::to_string(blocks).c_str() : "default");
  std::printf("%12s %10s %9s %10s %9s %8s %6s %9s\n", "bytes", "nccl_us", "nccl_bw", "ipc_us", "ipc_bw", "ipc/nccl",
              "auto", "ulps s/m");
  // What auto would pick: the calibration sizes (64 KiB x 4^k) of this run.
  std::vector<AllreduceTiming> cal;
  for (const Row& r : rows) {
    if (r.nccl_us > 0 && IsCalibrationSize(r.bytes)) {
      cal.push_back({r.bytes, r.nccl_us, r.ipc_us});
    }
  }
  auto choice = cal.empty() ? StatusOr<AllreduceChoice>(AllreduceChoice()) : AllreduceChoice::FromTimings(cal);
  double worst = 1.0;
  for (const Row& r : rows) {
    const bool have_nccl = r.nccl_us > 0;
    const bool ipc = choice.ok() && choice->For(r.bytes) == AllreducePath::kIpc;
    if (have_nccl) worst = std::max(worst, (ipc ? r.ipc_us : r.nccl_us) / std::min(r.ipc_us, r.nccl_us));
    const std::string ulps = have_nccl ? std::to_string(r.sum_ulps) + "/" + std::to_string(r.mean_ulps) : "-";
    std::printf("%12zu %10.1f %9.2f %10.1f %9.2f %8.2f %6s %9s\n", r.bytes, r.nccl_us, BusGBps(r.bytes, r.nccl_us, ranks),
                r.ipc_us, BusGBps(r.bytes, r.ipc_us, ranks), have_nccl ? r.nccl_us / r.ipc_us : 0.0,
                have_nccl ? (ipc ? "ipc" : "nccl") : "-", ulps.c_str());
  }
  if (choice.ok() && !cal.empty()) {
    std::printf("auto (calibrated at 64 KiB x 4^k): %s\nauto's worst cost vs the faster path: %.1f%%\n",
                choice->Describe().c_str(), (worst - 1) * 100);
  } else {
    std::printf("nccl: not run (fewer GPUs than ranks: NCCL refuses two ranks on one GPU)\n");
  }
}

int Main(int argc, char** argv) {
  Options o;
  int rank = -1;
  std::string dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--ranks") o.ranks = std::atoi(v.c_str());
    else if (k == "--min-bytes") o.min_bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--max-bytes") o.max_bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--runs") o.runs = std::atoi(v.c_str());
    else if (k == "--blocks") o.blocks = std::atoi(v.c_str());
    else if (k == "--rank") rank = std::atoi(v.c_str());
    else if (k == "--dir") dir = v;
    else Usage("unknown flag " + k + " (flags: --ranks --min-bytes --max-bytes --runs --blocks)");
  }
  if (argc % 2 == 0) Usage("flag " + std::string(argv[argc - 1]) + " needs a value");
  if (o.min_bytes < 4 || o.min_bytes % 4 != 0 || o.max_bytes < o.min_bytes || o.max_bytes % 4 != 0 || o.runs < 1) {
    Usage("--min-bytes and --max-bytes: multiples of 4, min <= max; --runs >= 1");
  }
  if (o.blocks < 0 || o.blocks > cuda::kIpcMaxBlocks) {
    Usage("--blocks: 0 (the default) to " + std::to_string(cuda::kIpcMaxBlocks));
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) Die("no CUDA device");
  if (o.ranks == 0) o.ranks = std::max(2, devices);
  if (o.ranks < 2 || o.ranks > cuda::kIpcMaxRanks) Usage("--ranks: 2 to " + std::to_string(cuda::kIpcMaxRanks));
  if (rank >= 0) return RunRank(rank, o.ranks, dir, o);
  char tmpl[] = "/tmp/osprey-allreduce-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
  dir = tmpl;
  std::vector<pid_t> pids;
  for (int r = 0; r < o.ranks; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<std::string> args = {"/proc/self/exe", "--rank", std::to_string(r), "--dir", dir,
                                       "--ranks", std::to_string(o.ranks), "--min-bytes", std::to_string(o.min_bytes),
                                       "--max-bytes", std::to_string(o.max_bytes), "--runs", std::to_string(o.runs),
                                       "--blocks", std::to_string(o.blocks)};
      std::vector<char*> c;
      for (std::string& a : args) c.push_back(a.data());
      c.push_back(nullptr);
      ::execv(c[0], c.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  if (failed) Die(std::to_string(failed) + " rank(s) failed");
  const std::string raw = ReadAll(dir + "/rows");
  std::vector<Row> rows(raw.size() / sizeof(Row));
  std::memcpy(rows.data(), raw.data(), rows.size() * sizeof(Row));
  Print(rows, o.ranks, o.blocks);
  return 0;
}

}  // namespace
}  // namespace osprey::bench

int main(int argc, char** argv) { return osprey::bench::Main(argc, argv); }
