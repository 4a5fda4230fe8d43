#include "common/cpu_affinity.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace osprey {
namespace {

constexpr int kMaxCpu = CPU_SETSIZE - 1;

bool ParseNumber(const std::string& s, int* out) {
  if (s.empty() || s.size() > 4 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  *out = std::stoi(s);
  return *out <= kMaxCpu;
}

}  // namespace

StatusOr<std::vector<int>> ParseCpuList(const std::string& list) {
  std::vector<int> cpus;
  size_t start = 0;
  while (start < list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(start, comma - start);
    const size_t dash = item.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string::npos) {
      if (!ParseNumber(item, &lo)) {
        return InvalidArgument("'" + item + "' is not a CPU number (0 to " + std::to_string(kMaxCpu) + ")");
      }
      hi = lo;
    } else if (!ParseNumber(item.substr(0, dash), &lo) || !ParseNumber(item.substr(dash + 1), &hi) || lo > hi) {
      return InvalidArgument("'" + item + "' is not a range low-high of CPU numbers");
    }
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    start = comma + 1;
    if (comma + 1 == list.size()) return InvalidArgument("'" + list + "' ends with a comma");
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(cpus[i]);
    if (j > i) s += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return s;
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

Status PinProcessTo(const std::vector<int>& cpus) {
  if (cpus.empty()) return InvalidArgument("an empty CPU list");
  const long machine = ::sysconf(_SC_NPROCESSORS_CONF);
  std::vector<int> beyond;
  for (int c : cpus) {
    if (c < 0 || c > kMaxCpu || c >= machine) beyond.push_back(c);
  }
  if (!beyond.empty()) {
    return FailedPrecondition("CPU " + FormatCpuList(beyond) + " not on this machine (CPUs 0-" +
                              std::to_string(machine - 1) + ")");
  }
  const std::vector<int> before = AllowedCpus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (::sched_setaffinity(0, sizeof(set), &set) != 0) {
    if (errno == EINVAL) {
      return FailedPrecondition("none of CPUs " + FormatCpuList(cpus) + " is in this process's cpuset (it runs on " +
                                FormatCpuList(before) + ")");
    }
    return Internal(std::string("sched_setaffinity: ") + std::strerror(errno));
  }
  // The kernel keeps only the CPUs of the cpuset: a partial list is an error too.
  const std::vector<int> now = AllowedCpus();
  std::vector<int> missing;
  for (int c : cpus) {
    if (!std::binary_search(now.begin(), now.end(), c)) missing.push_back(c);
  }
  if (!missing.empty()) {
    return FailedPrecondition("CPU " + FormatCpuList(missing) + " not in this process's cpuset (it runs on " +
                              FormatCpuList(now) + ")");
  }
  return Status::OK();
}

Status PinProcessToList(const std::string& list) {
  if (list.empty()) return Status::OK();
  OSPREY_ASSIGN_OR_RETURN(std::vector<int> cpus, ParseCpuList(list));
  return PinProcessTo(cpus);
}

}  // namespace osprey
