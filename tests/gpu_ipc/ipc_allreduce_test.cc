// IpcAllreduce (worker/cuda/ipc) between two real processes: this binary, started again with
// --ipc-rank, is each rank. The ranks exchange handles through files in a temporary directory
// (the coordinator does it in a job), take GPU rank % visible devices (one GPU: both ranks share
// it, which checks the protocol though not the speed), and compare every result, bit for bit,
// with the CPU sum in rank order. Without a device the process tests skip; the argument checks
// run everywhere.
#include <gtest/gtest.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/launch_util.h"
#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/ipc/ipc_allreduce.h"

namespace osprey::cuda {
namespace {

constexpr int kRanks = 2;

// Rank r's input at element i: magnitudes over 2^-10..2^10 with random mantissas, so sums round.
float Input(int rank, size_t i, uint64_t seed) {
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull) ^ (rank + 1ull) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD39ull;
  x ^= x >> 29;
  const float m = static_cast<float>(x & 0xFFFFFF) / 16777216.0f;
  const int e = static_cast<int>((x >> 24) % 21) - 10;
  return ((x >> 40) & 1 ? -1.0f : 1.0f) * std::ldexp(0.5f + m / 2, e);
}

float Expected(size_t i, uint64_t seed, bool average) {
  float s = 0;
  for (int r = 0; r < kRanks; ++r) {
    const float x = average ? Input(r, i, seed) * (1.0f / kRanks) : Input(r, i, seed);
    s = r == 0 ? x : s + x;
  }
  return s;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Waits (bounded) for `path` to exist.
bool WaitForFile(const std::string& path, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (::access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

void WriteFileAtomically(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::binary) << data;
  std::rename(tmp.c_str(), path.c_str());
}

struct Case {
  size_t count, offset;
  bool average;
};

// One rank of the "sizes" case: every size from 1 float to 256 MB, aligned and not, sum and mean.
int RunSizes(IpcAllreduce& ar) {
  std::vector<Case> cases;
  for (size_t count : {size_t{1}, size_t{3}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{4097},
                       size_t{16} << 10, (size_t{256} << 10) / 4, (size_t{256} << 10) / 4 + 1, (size_t{1} << 20) + 3,
                       (size_t{16} << 20) / 4, (size_t{64} << 20) / 4 + 5, (size_t{256} << 20) / 4 - 3}) {
    cases.push_back({count, 0, false});
    cases.push_back({count, 1, true});
    if (count < (size_t{1} << 20)) cases.push_back({count, 3, false});
  }
  for (int i = 0; i < 40; ++i) cases.push_back({size_t{1000} + i, 0, i % 2 == 1});  // the halves alternate
  cudaStream_t s;
  if (cudaStreamCreate(&s) != cudaSuccess) return 3;
  int bad_cases = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    const size_t total = k.count + k.offset + 16;  // guards before and after
    std::vector<float> h(total, -7.0f);
    for (size_t i = 0; i < k.count; ++i) h[k.offset + i] = Input(ar.rank(), i, c);
    float* d = nullptr;
    if (cudaMalloc(&d, total * sizeof(float)) != cudaSuccess) return 3;
    cudaMemcpy(d, h.data(), total * sizeof(float), cudaMemcpyHostToDevice);
    Status st = ar.AllReduce(d + k.offset, k.count, k.average, s);
    if (st.ok()) st = ar.Check(s);
    if (!st.ok()) {
      std::printf("case %zu (count %zu offset %zu): %s\n", c, k.count, k.offset, st.ToString().c_str());
      return 2;
    }
    std::vector<float> out(total);
    cudaMemcpy(out.data(), d, total * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(d);
    size_t wrong = 0, guards = 0, first = SIZE_MAX;
    for (size_t i = 0; i < k.count; ++i) {
      const float want = Expected(i, c, k.average);
      if (std::memcmp(&want, &out[k.offset + i], 4) != 0) {
        if (wrong++ == 0) first = i;
      }
    }
    for (size_t i = 0; i < k.offset; ++i) guards += out[i] != -7.0f;
    for (size_t i = k.offset + k.count; i < total; ++i) guards += out[i] != -7.0f;
    if (wrong || guards) {
      ++bad_cases;
      std::printf("case %zu (count %zu offset %zu %s): %zu wrong (first at %zu: %.9g, want %.9g), %zu guards hit\n",
                  c, k.count, k.offset, k.average ? "mean" : "sum", wrong, first,
                  first == SIZE_MAX ? 0.0 : out[k.offset + first], first == SIZE_MAX ? 0.0 : Expected(first, c, k.average),
                  guards);
    }
  }
  std::printf("rank %d: %zu cases, %d wrong, %u calls\n", ar.rank(), cases.size(), bad_cases, ar.calls());
  return bad_cases == 0 ? 0 : 1;
}

// Rank 0 of the "peer_dies" case: waits for the test's go (rank 1 is dead by then), then calls.
int RunPeerDies(IpcAllreduce& ar, const std::string& dir) {
  if (ar.rank() == 1) {
    WriteFileAtomically(dir + "/connected.1", "");
    std::this_thread::sleep_for(std::chrono::seconds(600));  // until killed
    return 0;
  }
  if (!WaitForFile(dir + "/go", 120)) return 3;
  cudaStream_t s;
  if (cudaStreamCreate(&s) != cudaSuccess) return 3;
  float* d = nullptr;
  if (cudaMalloc(&d, 4096 * sizeof(float)) != cudaSuccess) return 3;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = ar.AllReduce(d, 4096, false, s);
  cudaEvent_t done;
  cudaEventCreate(&done);
  cudaEventRecord(done, s);
  cudaEventSynchronize(done);
  Status polled = ar.Poll();  // what a loop that waits on an event sees, before Check
  std::printf("poll: %s\n", polled.ToString().c_str());
  if (polled.ok()) return 1;
  if (st.ok()) st = ar.Check(s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rank 0 after %.2f s: %s\n", secs, st.ToString().c_str());
  Status again = ar.AllReduce(d, 4096, false, s);
  std::printf("next call: %s\n", again.ToString().c_str());
  return !st.ok() && !again.ok() && secs < 60 ? 0 : 1;
}

int RunRank(int rank, const std::string& dir, const std::string& which) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return 4;
  cudaSetDevice(rank % devices);
  IpcAllreduceOptions o;
  o.max_bytes = size_t{256} << 20;
  o.timeout_ms = which == "peer_dies" ? 3000 : 30000;  // one shared GPU time-slices the two ranks
  auto ar = IpcAllreduce::Create(rank, kRanks, o);
  if (!ar.ok()) {
    std::printf("Create: %s\n", ar.status().ToString().c_str());
    return 2;
  }
  WriteFileAtomically(dir + "/handle." + std::to_string(rank), (*ar)->handle());
  std::vector<std::string> handles;
  for (int r = 0; r < kRanks; ++r) {
    const std::string path = dir + "/handle." + std::to_string(r);
    if (!WaitForFile(path, 120)) return 3;
    handles.push_back(ReadAll(path));
  }
  Status st = (*ar)->Connect(handles);
  if (!st.ok()) {
    std::printf("Connect: %s\n", st.ToString().c_str());
    return 2;
  }
  return which == "sizes" ? RunSizes(**ar) : RunPeerDies(**ar, dir);
}

std::string MakeDir() {
  char tmpl[] = "/tmp/osprey-ipc-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  return d ? d : "";
}

std::vector<pid_t> StartRanks(const std::string& dir, const std::string& which) {
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    pids.push_back(testing::SpawnLogged("/proc/self/exe",
                                        {"--ipc-rank", std::to_string(r), "--ipc-dir", dir, "--ipc-case", which},
                                        dir + "/rank" + std::to_string(r) + ".log"));
  }
  return pids;
}

TEST(IpcAllreduceTest, TwoProcessesGetTheCpuSumBitForBitAtEverySize) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device here";
  const std::string dir = MakeDir();
  ASSERT_FALSE(dir.empty());
  std::vector<pid_t> pids = StartRanks(dir, "sizes");
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(testing::WaitLaunch(pids[r], std::chrono::seconds(900)), 0)
        << "rank " << r << ":\n" << ReadAll(dir + "/rank" + std::to_string(r) + ".log");
  }
  std::printf("%s", ReadAll(dir + "/rank0.log").c_str());
}

TEST(IpcAllreduceTest, APeerKilledMidJobFailsTheOtherWithinTheTimeout) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device here";
  const std::string dir = MakeDir();
  ASSERT_FALSE(dir.empty());
  std::vector<pid_t> pids = StartRanks(dir, "peer_dies");
  ASSERT_TRUE(WaitForFile(dir + "/connected.1", 120)) << ReadAll(dir + "/rank1.log");
  ::kill(pids[1], SIGKILL);
  int status = 0;
  ::waitpid(pids[1], &status, 0);
  WriteFileAtomically(dir + "/go", "");
  EXPECT_EQ(testing::WaitLaunch(pids[0], std::chrono::seconds(120)), 0) << ReadAll(dir + "/rank0.log");
  const std::string log = ReadAll(dir + "/rank0.log");
  std::printf("%s", log.c_str());
  EXPECT_NE(log.find("rank 1"), std::string::npos) << "the error names the peer";
}

TEST(IpcAllreduceTest, RefusesBadGroupsAndHandlesByName) {
  auto one = IpcAllreduce::Create(0, 1, {});
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("1 ranks"), std::string::npos) << one.status().ToString();
  auto outside = IpcAllreduce::Create(2, 2, {});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("rank 2 of 2"), std::string::npos);
  IpcAllreduceOptions odd;
  odd.max_bytes = 6;
  EXPECT_FALSE(IpcAllreduce::Create(0, 2, odd).ok());
  if (DeviceCount() == 0) return;  // the handle checks need a buffer
  auto ar = IpcAllreduce::Create(0, 2, {});
  ASSERT_TRUE(ar.ok()) << ar.status().ToString();
  Status early = (*ar)->AllReduce(nullptr, 4, false, nullptr);
  EXPECT_EQ(early.code(), StatusCode::kFailedPrecondition) << early.ToString();
  Status st = (*ar)->Connect({(*ar)->handle(), "short"});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank 1 has 5 bytes"), std::string::npos) << st.ToString();
  // Rank 0's own handle offered as rank 1's.
  st = (*ar)->Connect({(*ar)->handle(), (*ar)->handle()});
  EXPECT_NE(st.message().find("says rank 0 of 2"), std::string::npos) << st.ToString();
  IpcAllreduceOptions other;
  other.max_bytes = size_t{1} << 20;
  auto theirs = IpcAllreduce::Create(1, 2, other);
  ASSERT_TRUE(theirs.ok());
  st = (*ar)->Connect({(*ar)->handle(), (*theirs)->handle()});
  EXPECT_NE(st.message().find("disagrees"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace osprey::cuda

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--ipc-rank" && i + 5 < argc) {
      return osprey::cuda::RunRank(std::atoi(argv[i + 1]), argv[i + 3], argv[i + 5]);
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
