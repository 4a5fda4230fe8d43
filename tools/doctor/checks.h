// The checks of `osprey doctor`: each a verdict (ok / warn / fail / skip), what was found and,
// unless ok, the fix. The check functions read /sys, /proc and (through dlopen, so the CPU build
// links nothing) NVML, the CUDA driver and NCCL; they never change the machine.
// Thread-safety: a DoctorReport is used by one thread; the check functions share no state.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/transport.h"

namespace osprey::tools::doctor {

enum class Verdict { kOk, kWarn, kFail, kSkip };
const char* VerdictName(Verdict v);  // "ok", "warn", "fail", "skip"

struct Check {
  std::string group;  // "build", "cpu", "memory", "zeromq", "gpu", "nccl", "rdma", "network"
  std::string name;
  Verdict verdict = Verdict::kOk;
  std::string found;  // what the check saw
  std::string fix;    // what to do about it ("" when ok)
};

class DoctorReport {
 public:
  void Add(std::string group, std::string name, Verdict v, std::string found,
           std::string fix = "");
  const std::vector<Check>& checks() const { return checks_; }
  // Extra lines printed under the last check (a P2P matrix, a latency table); JSON keeps them
  // as the check's "details" array.
  void AddDetail(std::string line);
  // Human-readable: one line per check, grouped, with the fix indented under a warn / fail.
  std::string Text() const;
  // {"checks": [{"group", "name", "verdict", "found", "fix", "details": [...]}, ...],
  //  "summary": {"ok": N, "warn": N, "fail": N, "skip": N}, "network": [...]} (network only
  // when measured).
  std::string Json() const;
  // The worst verdict's count (for the exit code): number of fail checks.
  int failures() const;
  void SetNetworkJson(std::string json) { network_json_ = std::move(json); }

 private:
  std::vector<Check> checks_;
  std::vector<std::vector<std::string>> details_;
  std::string network_json_;
};

// Escapes `s` as the inside of a JSON string.
std::string JsonEscape(const std::string& s);

// "build": CUDA kernels, RDMA and Redis libraries, CURVE; "zeromq": version and CURVE.
void BuildChecks(bool cuda, bool rdma, bool redis, DoctorReport* r);
// "cpu", "memory": cores and affinity, NUMA nodes, transparent and reserved huge pages.
void CpuMemoryChecks(DoctorReport* r);
// "gpu", "nccl": NVML (driver, GPUs, PCIe links, P2P / NVLink matrix), the CUDA driver, the NCCL
// library's version and the NCCL_* variables in `nccl_env` (name -> value, as set).
void GpuChecks(const std::map<std::string, std::string>& nccl_env, DoctorReport* r);
// "rdma", "network": RDMA devices and ports, NIC link speeds, NIC IRQ affinity versus the CPUs
// of running osprey-worker / osprey-server processes.
void RdmaNetworkChecks(DoctorReport* r);

// One size of the --network curve.
struct NetworkPoint {
  uint64_t reply_bytes = 0;    // the rows pulled
  uint64_t request_bytes = 0;  // the keys sent
  double median_us = 0;        // one round trip
  double gbps = 0;             // (request + reply) bytes / median time
  int runs = 0;
};
// Round trips against a running osprey-server at `endpoint`: sparse pulls of sparse table
// `table` asking `n` times for one key the server owns (the first of keys 0..255 it accepts; a
// pull creates that one row when absent), n chosen so the reply is each size of `sizes` (bytes).
// `options` carries CURVE (a worker keypair) when the job has it. Errors name the endpoint and
// what the server answered.
StatusOr<std::vector<NetworkPoint>> MeasureNetwork(const std::string& endpoint,
                                                   const TransportOptions& options, uint32_t table,
                                                   const std::vector<uint64_t>& sizes,
                                                   int timeout_ms);

}  // namespace osprey::tools::doctor
