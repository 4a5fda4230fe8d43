#include <dirent.h>

#include <cstdio>
#include <string>
#include <vector>

#include "osprey.pb.h"
#include "common/rdma/startup_check.h"
#include "common/zmq_curve.h"
#include "tools/commands.h"
#include "tools/paths.h"

// Set by tools/CMakeLists.txt from the configure-time feature detection.
#ifndef OSPREY_BUILT_WITH_CUDA
#define OSPREY_BUILT_WITH_CUDA 0
#endif
#ifndef OSPREY_BUILT_WITH_RDMA
#define OSPREY_BUILT_WITH_RDMA 0
#endif
#ifndef OSPREY_BUILT_WITH_REDIS
#define OSPREY_BUILT_WITH_REDIS 0
#endif

namespace osprey::tools {
namespace {

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
  }
  return names;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// GPU names from `nvidia-smi -L`, bounded by coreutils timeout when available.
std::vector<std::string> ListGpus(const std::string& nvidia_smi) {
  std::vector<std::string> gpus;
  std::string cmd = FindOnPath("timeout").empty() ? "" : "timeout 10 ";
  cmd += "'" + nvidia_smi + "' -L 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return gpus;
  char line[512];
  while (std::fgets(line, sizeof(line), p)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.rfind("GPU ", 0) == 0) gpus.push_back(s);
  }
  ::pclose(p);
  return gpus;
}

void Row(const char* what, const std::string& value) {
  std::printf("  %-22s %s\n", what, value.c_str());
}

}  // namespace

int RunDoctor(const std::string& bin_dir) {
  std::printf("osprey doctor (protocol version %d)\n", proto::PROTOCOL_VERSION_CURRENT);
  std::printf("this build:\n");
  Row("CUDA kernels", OSPREY_BUILT_WITH_CUDA ? "yes" : "no");
  Row("Redis store", OSPREY_BUILT_WITH_REDIS
                         ? "yes (store.type: redis; one node or a Redis Cluster, hiredis 0.14)"
                         : "no: built without hiredis (store.type: redis is refused)");
  Row("CURVE (security)", CurveAvailable() ? "yes (libzmq with libsodium)"
                                             : "no: this libzmq has no CURVE, security: curve fails");
  std::printf("this machine:\n");
  const std::string smi = FindOnPath("nvidia-smi");
  if (smi.empty()) {
    Row("nvidia-smi", "not on PATH (no NVIDIA driver visible)");
  } else {
    std::vector<std::string> gpus = ListGpus(smi);
    Row("nvidia-smi", smi);
    Row("GPUs", gpus.empty() ? "none visible" : std::to_string(gpus.size()));
    for (const std::string& g : gpus) Row("", g);
  }
  std::vector<std::string> ib = DirEntries("/sys/class/infiniband");
  Row("/sys/class/infiniband", ib.empty() ? "empty or absent" : Join(ib));
  for (const auto& [what, value] : rdma::RdmaDoctorRows()) Row(what.c_str(), value);
  const std::string redis = FindOnPath("redis-server");
  Row("redis-server", redis.empty() ? "not on PATH" : redis);
  std::printf("binaries in %s:\n", bin_dir.c_str());
  for (const char* name : {"osprey-coordinator", "osprey-server", "osprey-worker"}) {
    Row(name, IsExecutable(bin_dir + "/" + name) ? "found" : "MISSING");
  }
  std::vector<std::string> benches = ListBinaries(bin_dir, "osprey-bench-");
  Row("benchmarks", benches.empty() ? "none" : Join(benches));
  return 0;
}

}  // namespace osprey::tools
