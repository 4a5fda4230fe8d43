// The doctor's build, ZeroMQ, CPU and memory checks.
#include <sched.h>
#include <unistd.h>
#include <zmq.h>

#include <cctype>
#include <string>

#include "common/zmq_curve.h"
#include "tools/doctor/checks.h"
#include "tools/doctor/sysfs.h"

namespace osprey::tools::doctor {

void BuildChecks(bool cuda, bool rdma, bool redis, DoctorReport* r) {
  r->Add("build", "CUDA kernels", cuda ? Verdict::kOk : Verdict::kSkip,
         cuda ? "built with CUDA" : "CPU-only build (worker.device: cuda is unavailable)",
         "on a GPU machine: deploy/configure.sh with nvcc on PATH (OSPREY_WITH_CUDA=ON)");
  r->Add("build", "RDMA libraries", rdma ? Verdict::kOk : Verdict::kSkip,
         rdma ? "libibverbs and librdmacm found at configure time" : "not found at configure time",
         "apt-get install libibverbs-dev librdmacm-dev, then configure again");
  r->Add("build", "Redis store (hiredis)", redis ? Verdict::kOk : Verdict::kSkip,
         redis ? "hiredis found at configure time" : "hiredis not found at configure time",
         "apt-get install libhiredis-dev, then configure again");
  int major = 0, minor = 0, patch = 0;
  zmq_version(&major, &minor, &patch);
  const std::string version = std::to_string(major) + "." + std::to_string(minor) + "." +
                              std::to_string(patch);
  const bool old = major < 4 || (major == 4 && minor < 3);
  r->Add("zeromq", "libzmq version", old ? Verdict::kWarn : Verdict::kOk, version,
         "libzmq >= 4.3 (Debian 12 has 4.3.4): apt-get install libzmq3-dev");
  const bool curve = zmq_has("curve") != 0 && CurveAvailable();
  r->Add("zeromq", "CURVE", curve ? Verdict::kOk : Verdict::kFail,
         curve ? "available (libsodium): security: curve works"
               : "this libzmq has no CURVE: security: curve fails at start",
         "a libzmq built with libsodium (Debian's libzmq5 is)");
}

void CpuMemoryChecks(DoctorReport* r) {
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  const int allowed = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
  std::string found = std::to_string(online) + " online, " + std::to_string(allowed) +
                      " usable by this process";
  Verdict v = allowed >= 4 ? Verdict::kOk : Verdict::kWarn;
  r->Add("cpu", "cores", v, found,
         "a server and a worker each want several cores (I/O threads, merge, data): give the "
         "job >= 4 cores per node, or fewer processes per node");

  std::vector<std::string> nodes;
  for (const std::string& n : ListDir("/sys/devices/system/node")) {
    if (n.rfind("node", 0) == 0 && n.size() > 4 && std::isdigit(static_cast<unsigned char>(n[4]))) {
      nodes.push_back(n);
    }
  }
  if (nodes.empty()) {
    r->Add("cpu", "NUMA nodes", Verdict::kSkip, "/sys/devices/system/node lists no nodes");
  } else {
    std::vector<std::string> parts;
    for (const std::string& n : nodes) {
      parts.push_back(n + ": cpus " + ReadTrimmed("/sys/devices/system/node/" + n + "/cpulist"));
    }
    r->Add("cpu", "NUMA nodes", Verdict::kOk,
           std::to_string(nodes.size()) + " (" + JoinStrings(parts, "; ") + ")",
           "");
    if (nodes.size() > 1) {
      r->AddDetail("several nodes: run each server / worker inside one node (numactl "
                   "--cpunodebind=N --membind=N, or srun --cpu-bind=ldoms), GPU workers on "
                   "their GPU's node");
    }
  }

  const std::string thp = ReadTrimmed("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp.empty()) {
    r->Add("memory", "transparent huge pages", Verdict::kSkip,
           "/sys/kernel/mm/transparent_hugepage/enabled is absent");
  } else {
    const bool off = thp.find("[never]") != std::string::npos;
    r->Add("memory", "transparent huge pages", off ? Verdict::kWarn : Verdict::kOk, thp,
           "servers madvise their large tables for 2 MiB pages (fewer TLB misses per sparse "
           "row): echo madvise > /sys/kernel/mm/transparent_hugepage/enabled");
  }
  std::string total, free_pages, size;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  std::string mem_total;
  while (std::getline(meminfo, line)) {
    auto value = [&line] {
      std::string v = line.substr(line.find(':') + 1);
      v.erase(0, v.find_first_not_of(' '));
      return v;
    };
    if (line.rfind("HugePages_Total:", 0) == 0) total = value();
    if (line.rfind("HugePages_Free:", 0) == 0) free_pages = value();
    if (line.rfind("Hugepagesize:", 0) == 0) size = value();
    if (line.rfind("MemTotal:", 0) == 0) mem_total = value();
  }
  r->Add("memory", "memory", mem_total.empty() ? Verdict::kSkip : Verdict::kOk,
         mem_total.empty() ? "/proc/meminfo unreadable" : mem_total + " total");
  r->Add("memory", "reserved huge pages", Verdict::kOk,
         (total.empty() ? "?" : total) + " reserved (" + (free_pages.empty() ? "?" : free_pages) +
             " free) of " + (size.empty() ? "?" : size) +
             "; Osprey uses transparent huge pages, not reserved ones");
}

}  // namespace osprey::tools::doctor
