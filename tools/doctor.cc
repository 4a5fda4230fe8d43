// `osprey doctor`: the troubleshooting guide made executable (tools/doctor/checks.h has the
// checks); optionally the small-message curve against a running server.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/config/security_config.h"
#include "common/rdma/startup_check.h"
#include "osprey.pb.h"
#include "tools/commands.h"
#include "tools/doctor/checks.h"
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

using doctor::DoctorReport;
using doctor::Verdict;

void InstallChecks(const std::string& bin_dir, DoctorReport* r) {
  for (const char* name : {"osprey-coordinator", "osprey-server", "osprey-worker"}) {
    const bool ok = IsExecutable(bin_dir + "/" + name);
    r->Add("install", name, ok ? Verdict::kOk : Verdict::kFail,
           ok ? "found in " + bin_dir : "missing from " + bin_dir,
           "build it (deploy/build.sh) or pass --bin-dir");
  }
  const std::string redis = FindOnPath("redis-server");
  r->Add("install", "redis-server", redis.empty() ? Verdict::kSkip : Verdict::kOk,
         redis.empty() ? "not on PATH (only the redis store needs it)" : redis,
         "apt-get install redis-server");
}

// 4 KiB .. 64 MiB, x4.
std::vector<uint64_t> CurveSizes() {
  std::vector<uint64_t> s;
  for (uint64_t b = 4096; b <= (uint64_t{64} << 20); b *= 4) s.push_back(b);
  return s;
}

void NetworkCheck(const DoctorOptions& o, DoctorReport* r) {
  config::SecurityConfig sec;
  if (!o.keys_dir.empty()) {
    sec.mode = config::SecurityMode::kCurve;
    sec.keys_dir = o.keys_dir;
  }
  StatusOr<TransportOptions> options =
      config::MakeTransportOptions(sec, PeerRole::kWorker, PeerRole::kServer);
  if (!options.ok()) {
    r->Add("network", "round trips", Verdict::kFail, options.status().ToString(),
           "--keys names the job's key directory (osprey keygen)");
    return;
  }
  auto points = doctor::MeasureNetwork(o.network, *options, static_cast<uint32_t>(o.network_table),
                                       CurveSizes(), 10000);
  if (!points.ok()) {
    r->Add("network", "round trips to " + o.network, Verdict::kFail, points.status().ToString(),
           "give the endpoint an osprey-server prints (\"serving on ...\") and, under security: "
           "curve, --keys DIR");
    return;
  }
  std::string json = "[";
  double small_us = 0, big_gbps = 0;
  for (size_t i = 0; i < points->size(); ++i) {
    const doctor::NetworkPoint& p = (*points)[i];
    if (i == 0) small_us = p.median_us;
    big_gbps = std::max(big_gbps, p.gbps);
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"reply_bytes\": %llu, \"request_bytes\": %llu, \"median_us\": %.1f, "
                  "\"gbps\": %.4f, \"runs\": %d}",
                  i == 0 ? "" : ", ", static_cast<unsigned long long>(p.reply_bytes),
                  static_cast<unsigned long long>(p.request_bytes), p.median_us, p.gbps, p.runs);
    json += buf;
  }
  json += "]";
  char found[160];
  std::snprintf(found, sizeof(found), "%zu sizes: %.0f us for the smallest, best %.2f GB/s",
                points->size(), small_us, big_gbps);
  // Loopback on a small VM does ~1-3 GB/s; a 10 GbE path ~1.1 GB/s at best.
  const bool slow = big_gbps < 0.5;
  r->Add("network", "round trips to " + o.network, slow ? Verdict::kWarn : Verdict::kOk, found,
         "below 0.5 GB/s at 64 MiB: check the NIC speed above, MTU, and that cluster.host names "
         "the fast interface");
  r->AddDetail("reply bytes   request bytes   median us     GB/s");
  for (const doctor::NetworkPoint& p : *points) {
    char row[128];
    std::snprintf(row, sizeof(row), "%11llu   %13llu   %9.1f   %6.3f",
                  static_cast<unsigned long long>(p.reply_bytes),
                  static_cast<unsigned long long>(p.request_bytes), p.median_us, p.gbps);
    r->AddDetail(row);
  }
  r->SetNetworkJson(json);
}

}  // namespace

int RunDoctor(const DoctorOptions& o) {
  DoctorReport r;
  doctor::BuildChecks(OSPREY_BUILT_WITH_CUDA, OSPREY_BUILT_WITH_RDMA, OSPREY_BUILT_WITH_REDIS, &r);
  InstallChecks(o.bin_dir, &r);
  doctor::CpuMemoryChecks(&r);
  doctor::GpuChecks(o.nccl_env, &r);
  doctor::RdmaNetworkChecks(&r);
  // What libibverbs itself reports (the rdma transport's own view: devices, ports, GIDs,
  // device-memory registration), next to the sysfs checks above.
  for (const auto& [what, value] : rdma::RdmaDoctorRows()) {
    r.Add("rdma", "verbs: " + what, Verdict::kOk, value);
  }
  if (!o.network.empty()) NetworkCheck(o, &r);
  if (o.json) {
    std::printf("%s", r.Json().c_str());
  } else {
    std::printf("osprey doctor (protocol version %d)\n%s", proto::PROTOCOL_VERSION_CURRENT,
                r.Text().c_str());
  }
  return r.failures() > 0 ? 1 : 0;
}

}  // namespace osprey::tools
