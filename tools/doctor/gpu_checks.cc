// The doctor's GPU and NCCL checks. NVML (libnvidia-ml.so.1), the CUDA driver (libcuda.so.1)
// and NCCL (libnccl.so.2) are opened with dlopen, so a CPU build links none of them and a
// machine without them gets "skip" verdicts.
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <set>
#include <string>

#include "tools/doctor/checks.h"
#include "tools/doctor/sysfs.h"

namespace osprey::tools::doctor {
namespace {

// The few NVML entry points used, with NVML's C types reduced to what they are (nvmlDevice_t is
// a pointer, nvmlReturn_t and the enums are ints; NVML_SUCCESS is 0).
struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*driver_version)(char*, unsigned) = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*handle)(unsigned, void**) = nullptr;
  int (*name)(void*, char*, unsigned) = nullptr;
  int (*pcie_width)(void*, unsigned*) = nullptr;
  int (*pcie_gen)(void*, unsigned*) = nullptr;
  int (*max_pcie_width)(void*, unsigned*) = nullptr;
  int (*max_pcie_gen)(void*, unsigned*) = nullptr;
  int (*p2p_status)(void*, void*, int, int*) = nullptr;         // nvmlDeviceGetP2PStatus
  int (*topology)(void*, void*, int*) = nullptr;                // ...GetTopologyCommonAncestor
  int (*nvlink_state)(void*, unsigned, int*) = nullptr;         // nvmlDeviceGetNvLinkState

  template <typename F>
  void Load(F* f, const char* symbol) {
    *f = reinterpret_cast<F>(::dlsym(lib, symbol));
  }
  bool Open() {
    lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return false;
    Load(&init, "nvmlInit_v2");
    Load(&shutdown, "nvmlShutdown");
    Load(&driver_version, "nvmlSystemGetDriverVersion");
    Load(&count, "nvmlDeviceGetCount_v2");
    Load(&handle, "nvmlDeviceGetHandleByIndex_v2");
    Load(&name, "nvmlDeviceGetName");
    Load(&pcie_width, "nvmlDeviceGetCurrPcieLinkWidth");
    Load(&pcie_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
    Load(&max_pcie_width, "nvmlDeviceGetMaxPcieLinkWidth");
    Load(&max_pcie_gen, "nvmlDeviceGetMaxPcieLinkGeneration");
    Load(&p2p_status, "nvmlDeviceGetP2PStatus");
    Load(&topology, "nvmlDeviceGetTopologyCommonAncestor");
    Load(&nvlink_state, "nvmlDeviceGetNvLinkState");
    return init && shutdown && count && handle && name;
  }
};

constexpr int kP2pCapsRead = 0;    // NVML_P2P_CAPS_INDEX_READ
constexpr int kP2pCapsNvlink = 2;  // NVML_P2P_CAPS_INDEX_NVLINK
constexpr unsigned kMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS

// nvidia-smi topo -m's names for nvmlGpuTopologyLevel_t.
const char* TopologyName(int level) {
  switch (level) {
    case 0: return "SELF";
    case 10: return "PIX";
    case 20: return "PXB";
    case 30: return "PHB";
    case 40: return "NODE";
    case 50: return "SYS";
  }
  return "?";
}

void NvmlChecks(DoctorReport* r, int* gpus_out) {
  Nvml nv;
  if (!nv.Open()) {
    r->Add("gpu", "NVML", Verdict::kSkip,
           "libnvidia-ml.so.1 not loadable: no NVIDIA driver on this machine",
           "on a GPU machine: install the NVIDIA driver (it ships NVML)");
    return;
  }
  if (nv.init() != 0) {
    r->Add("gpu", "NVML", Verdict::kFail, "nvmlInit failed: the driver is installed but not "
           "loaded or mismatched", "check `nvidia-smi`; reboot after a driver upgrade");
    return;
  }
  char version[96] = "?";
  if (nv.driver_version) nv.driver_version(version, sizeof(version));
  unsigned n = 0;
  nv.count(&n);
  *gpus_out = static_cast<int>(n);
  r->Add("gpu", "NVIDIA driver", Verdict::kOk, std::string(version) + ", " + std::to_string(n) +
         " GPUs");
  std::vector<void*> devs(n, nullptr);
  for (unsigned i = 0; i < n; ++i) {
    char name[128] = "?";
    if (nv.handle(i, &devs[i]) != 0) continue;
    nv.name(devs[i], name, sizeof(name));
    unsigned w = 0, g = 0, mw = 0, mg = 0;
    if (nv.pcie_width) nv.pcie_width(devs[i], &w);
    if (nv.pcie_gen) nv.pcie_gen(devs[i], &g);
    if (nv.max_pcie_width) nv.max_pcie_width(devs[i], &mw);
    if (nv.max_pcie_gen) nv.max_pcie_gen(devs[i], &mg);
    int links = 0;
    for (unsigned l = 0; nv.nvlink_state && l < kMaxNvLinks; ++l) {
      int active = 0;
      if (nv.nvlink_state(devs[i], l, &active) == 0 && active) ++links;
    }
    char found[256];
    std::snprintf(found, sizeof(found), "%s; PCIe gen %u x%u (max gen %u x%u); %d NVLinks active",
                  name, g, w, mg, mw, links);
    const bool narrow = mw > 0 && w < mw;
    r->Add("gpu", "GPU " + std::to_string(i), narrow ? Verdict::kWarn : Verdict::kOk, found,
           "the PCIe link runs narrower than the GPU supports: reseat the card / check the slot "
           "and riser (a lower generation at idle is normal power saving)");
  }
  if (n > 1 && nv.p2p_status && nv.topology) {
    std::string header = "      ";
    for (unsigned j = 0; j < n; ++j) header += "GPU" + std::to_string(j) + "     ";
    int no_p2p = 0;
    std::vector<std::string> rows;
    for (unsigned i = 0; i < n; ++i) {
      std::string row = "GPU" + std::to_string(i) + "  ";
      for (unsigned j = 0; j < n; ++j) {
        std::string cell;
        if (i == j) {
          cell = "X";
        } else {
          int read = 1, nvl = 1, level = -1;
          nv.p2p_status(devs[i], devs[j], kP2pCapsRead, &read);
          nv.p2p_status(devs[i], devs[j], kP2pCapsNvlink, &nvl);
          nv.topology(devs[i], devs[j], &level);
          cell = nvl == 0 ? "NVL" : TopologyName(level);
          cell += read == 0 ? "/p2p" : "/-";
          if (read != 0) ++no_p2p;
        }
        cell.resize(std::max<size_t>(cell.size(), 9), ' ');
        row += cell;
      }
      rows.push_back(row);
    }
    r->Add("gpu", "P2P / NVLink matrix", no_p2p ? Verdict::kWarn : Verdict::kOk,
           std::to_string(n) + " GPUs, " + std::to_string(no_p2p) + " ordered pairs without P2P "
           "reads (NVL: NVLink; PIX/PXB/PHB/NODE/SYS: the PCIe path; /p2p: P2P reads work)",
           "pairs without P2P stage NCCL traffic through host memory: check the IOMMU / ACS "
           "settings, or NCCL_P2P_LEVEL");
    r->AddDetail(header);
    for (std::string& row : rows) r->AddDetail(row);
  }
  nv.shutdown();
}

void CudaDriverCheck(DoctorReport* r, int gpus) {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    r->Add("gpu", "CUDA driver", Verdict::kSkip, "libcuda.so.1 not loadable",
           gpus > 0 ? "install the driver's CUDA library (libcuda1 / the NVIDIA driver)" : "");
    return;
  }
  int (*driver_version)(int*) = reinterpret_cast<int (*)(int*)>(::dlsym(lib, "cuDriverGetVersion"));
  int v = 0;
  if (driver_version == nullptr || driver_version(&v) != 0) {
    r->Add("gpu", "CUDA driver", Verdict::kFail, "cuDriverGetVersion failed", "check the driver");
  } else {
    r->Add("gpu", "CUDA driver", Verdict::kOk, "CUDA " + std::to_string(v / 1000) + "." +
           std::to_string((v % 1000) / 10) + " supported by the driver");
  }
  ::dlclose(lib);
}

void NcclChecks(const std::map<std::string, std::string>& env, int gpus, DoctorReport* r) {
  void* lib = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    r->Add("nccl", "NCCL library", gpus > 1 ? Verdict::kWarn : Verdict::kSkip,
           "libnccl.so.2 not loadable",
           "GPU workers of one host reduce dense gradients over NCCL: apt-get install libnccl2 "
           "(or the CUDA repository's)");
  } else {
    int (*get)(int*) = reinterpret_cast<int (*)(int*)>(::dlsym(lib, "ncclGetVersion"));
    int v = 0;
    if (get && get(&v) == 0) {
      // Since 2.9: major * 10000 + minor * 100 + patch; before: major * 1000 + minor * 100 + patch.
      const int major = v >= 10000 ? v / 10000 : v / 1000;
      const int minor = v >= 10000 ? (v % 10000) / 100 : (v % 1000) / 100;
      r->Add("nccl", "NCCL library", Verdict::kOk, std::to_string(major) + "." +
             std::to_string(minor) + "." + std::to_string(v % 100));
    } else {
      r->Add("nccl", "NCCL library", Verdict::kWarn, "loaded, but ncclGetVersion failed");
    }
    ::dlclose(lib);
  }
  auto get = [&env](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  const std::string ifname = get("NCCL_SOCKET_IFNAME");
  if (ifname.empty()) {
    r->Add("nccl", "NCCL_SOCKET_IFNAME", Verdict::kOk,
           "unset: NCCL picks an interface itself (ib*, then anything but lo and docker*)");
  } else {
    // A comma list of prefixes; ^ excludes, = matches exactly.
    std::vector<std::string> missing;
    const std::vector<std::string> nics = ListDir("/sys/class/net");
    std::string list = ifname[0] == '^' ? "" : (ifname[0] == '=' ? ifname.substr(1) : ifname);
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
      bool any = false;
      for (const std::string& n : nics) any = any || n.rfind(item, 0) == 0;
      if (!item.empty() && !any) missing.push_back(item);
    }
    r->Add("nccl", "NCCL_SOCKET_IFNAME", missing.empty() ? Verdict::kOk : Verdict::kFail,
           ifname + (missing.empty() ? "" : " (no interface matches " + JoinStrings(missing) + ")"),
           "name interfaces of this host (ls /sys/class/net), e.g. NCCL_SOCKET_IFNAME=eth0");
  }
  const std::string ib = get("NCCL_IB_DISABLE");
  const bool has_ib = !ListDir("/sys/class/infiniband").empty();
  r->Add("nccl", "NCCL_IB_DISABLE", ib == "1" && has_ib ? Verdict::kWarn : Verdict::kOk,
         ib.empty() ? "unset" : ib,
         "RDMA devices are present but NCCL is told not to use them: unset NCCL_IB_DISABLE");
  const std::string p2p = get("NCCL_P2P_LEVEL");
  static const std::set<std::string> kLevels = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS",
                                                "0", "1", "2", "3", "4", "5"};
  r->Add("nccl", "NCCL_P2P_LEVEL",
         p2p.empty() || kLevels.count(p2p) ? Verdict::kOk : Verdict::kFail,
         p2p.empty() ? "unset (NCCL decides from the topology)" : p2p,
         "one of LOC, NVL, PIX, PXB, PHB, SYS");
  const std::string debug = get("NCCL_DEBUG");
  const bool verbose = debug == "INFO" || debug == "TRACE";
  r->Add("nccl", "NCCL_DEBUG", verbose ? Verdict::kWarn : Verdict::kOk,
         debug.empty() ? "unset" : debug,
         "INFO / TRACE log every connection and collective: for debugging only (WARN in "
         "production)");
}

}  // namespace

void GpuChecks(const std::map<std::string, std::string>& nccl_env, DoctorReport* r) {
  int gpus = 0;
  NvmlChecks(r, &gpus);
  CudaDriverCheck(r, gpus);
  NcclChecks(nccl_env, gpus, r);
}

}  // namespace osprey::tools::doctor
