// The doctor's RDMA, NIC link speed and IRQ affinity checks (from /sys and /proc).
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <set>
#include <string>

#include "tools/doctor/checks.h"
#include "tools/doctor/sysfs.h"

namespace osprey::tools::doctor {
namespace {

constexpr long kSlowNicMbps = 10000;

void RdmaChecks(DoctorReport* r) {
  const std::vector<std::string> devs = ListDir("/sys/class/infiniband");
  if (devs.empty()) {
    r->Add("rdma", "RDMA devices", Verdict::kSkip,
           "none (/sys/class/infiniband is empty or absent): the job uses TCP",
           "for RDMA: an InfiniBand / RoCE NIC with its driver (rdma-core)");
    return;
  }
  for (const std::string& d : devs) {
    const std::string base = "/sys/class/infiniband/" + d + "/ports";
    for (const std::string& p : ListDir(base)) {
      const std::string dir = base + "/" + p;
      const std::string state = ReadTrimmed(dir + "/state");   // "4: ACTIVE"
      const std::string rate = ReadTrimmed(dir + "/rate");     // "100 Gb/sec (4X EDR)"
      const std::string layer = ReadTrimmed(dir + "/link_layer");
      const bool active = state.find("ACTIVE") != std::string::npos;
      r->Add("rdma", d + " port " + p, active ? Verdict::kOk : Verdict::kWarn,
             state + ", " + rate + ", " + layer,
             "the port is not ACTIVE: check the cable / switch port and `ibstat " + d + "`");
    }
  }
}

// IRQ numbers of `nic` (its PCI device's msi_irqs), empty for a virtual one.
std::vector<int> NicIrqs(const std::string& nic) {
  std::vector<int> irqs;
  for (const std::string& s : ListDir("/sys/class/net/" + nic + "/device/msi_irqs")) {
    irqs.push_back(std::atoi(s.c_str()));
  }
  return irqs;
}

// CPUs allowed to running osprey-worker / osprey-server processes: pid -> cpus.
std::vector<std::pair<std::string, std::vector<int>>> TrainingProcesses() {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  for (const std::string& pid : ListDir("/proc")) {
    if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
    const std::string comm = ReadTrimmed("/proc/" + pid + "/comm");
    if (comm != "osprey-worker" && comm != "osprey-server") continue;
    std::ifstream status("/proc/" + pid + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) {
        std::string list = line.substr(line.find(':') + 1);
        list.erase(0, list.find_first_not_of(" \t"));
        out.emplace_back(comm + " " + pid, ParseCpuList(list));
      }
    }
  }
  return out;
}

void NicChecks(DoctorReport* r) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const auto procs = TrainingProcesses();
  int physical = 0;
  for (const std::string& nic : ListDir("/sys/class/net")) {
    if (nic == "lo") continue;
    const std::string dir = "/sys/class/net/" + nic;
    const bool is_physical = !ListDir(dir + "/device").empty();
    const std::string oper = ReadTrimmed(dir + "/operstate");
    const std::string speed_s = ReadTrimmed(dir + "/speed");  // Mb/s; unreadable or -1: unknown
    const long speed = speed_s.empty() ? -1 : std::atol(speed_s.c_str());
    if (!is_physical) {
      r->Add("network", nic + " link", Verdict::kSkip,
             "virtual interface (" + oper + ")" +
                 (speed > 0 ? ", " + std::to_string(speed) + " Mb/s reported" : ""));
      continue;
    }
    ++physical;
    const std::string numa = ReadTrimmed(dir + "/device/numa_node");
    std::string found = oper + ", " + (speed > 0 ? std::to_string(speed) + " Mb/s" : "speed unknown") +
                        (numa.empty() || numa == "-1" ? "" : ", NUMA node " + numa);
    Verdict v = Verdict::kOk;
    std::string fix;
    if (oper != "up") {
      v = Verdict::kSkip;
    } else if (speed <= 0) {
      v = Verdict::kWarn;
      fix = "the driver reports no speed (a VM's virtio NIC does this): measure with "
            "`osprey doctor --network`";
    } else if (speed < kSlowNicMbps) {
      v = Verdict::kWarn;
      fix = "below 10 Gb/s a 2 MiB dense push takes > 1.7 ms on the wire: use a faster NIC "
            "(NCCL_SOCKET_IFNAME / cluster.host to pick it)";
    }
    r->Add("network", nic + " link", v, found, fix);

    const std::vector<int> irqs = NicIrqs(nic);
    if (irqs.empty()) {
      r->Add("network", nic + " IRQ affinity", Verdict::kSkip, "no MSI IRQs listed in sysfs");
      continue;
    }
    std::set<int> irq_cpus;
    for (int irq : irqs) {
      for (int c : ParseCpuList(ReadTrimmed("/proc/irq/" + std::to_string(irq) +
                                            "/smp_affinity_list"))) {
        irq_cpus.insert(c);
      }
    }
    std::string irq_found = std::to_string(irqs.size()) + " IRQs on " +
                            std::to_string(irq_cpus.size()) + " of " + std::to_string(cpus) +
                            " CPUs";
    if (procs.empty()) {
      r->Add("network", nic + " IRQ affinity", Verdict::kSkip,
             irq_found + "; no osprey-worker / osprey-server running to compare with",
             "run doctor while the job trains");
      continue;
    }
    int overlapping = 0;
    for (const auto& [who, allowed] : procs) {
      const bool pinned = static_cast<long>(allowed.size()) < cpus;
      bool all_inside = pinned && !allowed.empty();
      for (int c : allowed) all_inside = all_inside && irq_cpus.count(c) > 0;
      if (all_inside) {
        ++overlapping;
        r->AddDetail(who + " is pinned to CPUs that also take " + nic + "'s interrupts");
      }
    }
    r->Add("network", nic + " IRQ affinity", overlapping ? Verdict::kWarn : Verdict::kOk,
           irq_found + "; " + std::to_string(procs.size()) + " training processes, " +
               std::to_string(overlapping) + " pinned only to IRQ CPUs",
           "keep NIC interrupts off the training cores: set /proc/irq/N/smp_affinity_list to "
           "other cores of the NIC's NUMA node (or let irqbalance do it) and pin the processes "
           "to the rest");
  }
  if (physical == 0) {
    r->Add("network", "physical NICs", Verdict::kSkip,
           "none with a device in /sys/class/net (a container or VM): link speed unknown",
           "measure the path with `osprey doctor --network SERVER_ENDPOINT`");
  }
}

}  // namespace

void RdmaNetworkChecks(DoctorReport* r) {
  RdmaChecks(r);
  NicChecks(r);
}

}  // namespace osprey::tools::doctor
