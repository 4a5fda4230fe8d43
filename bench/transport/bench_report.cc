#include "bench/transport/bench_report.h"

#include <cmath>
#include <fstream>

namespace osprey::bench {
namespace {

std::string JsonNumber(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", *v);
  return buf;
}

std::string JsonInt(std::optional<uint64_t> v) { return v ? std::to_string(*v) : "null"; }

std::string SizeLabel(uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

std::string CountLabel(uint64_t n) {
  if (n >= 1000000 && n % 1000000 == 0) return std::to_string(n / 1000000) + "M";
  if (n >= 1000 && n % 1000 == 0) return std::to_string(n / 1000) + "k";
  return std::to_string(n);
}

const BenchRecord* FindRaw(const std::vector<BenchRecord>& records, const BenchRecord& r,
                           const std::string& op) {
  for (const BenchRecord& x : records) {
    if (x.kind == "raw_zmq" && x.transport == r.transport && x.bytes == r.bytes && x.op == op) {
      return &x;
    }
  }
  return nullptr;
}

// The raw baseline's time for what `r` does, or a negative value when there is none.
double RawMicros(const std::vector<BenchRecord>& records, const BenchRecord& r) {
  if (r.kind != "dense") return -1;
  if (r.op == "pushpull") {
    const BenchRecord* push = FindRaw(records, r, "push");
    const BenchRecord* pull = FindRaw(records, r, "pull");
    return push && pull ? push->median_us + pull->median_us : -1;
  }
  // A pull into a Buffer does what the raw pull does (no copy out of the received frame).
  const BenchRecord* raw = FindRaw(records, r, r.op == "pull_buffer" ? "pull" : r.op);
  return raw ? raw->median_us : -1;
}

std::string Cell(const char* fmt, std::optional<double> v, double scale = 1) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), fmt, *v * scale);
  return buf;
}

}  // namespace

BenchRecord MakeRecord(const std::string& kind, const std::string& transport, BenchOp op,
                       uint64_t bytes, std::optional<uint64_t> keys, std::optional<uint64_t> dim,
                       double seconds, int requests, double cpu_seconds) {
  BenchRecord r;
  r.kind = kind;
  r.transport = transport;
  r.op = BenchOpName(op);
  r.bytes = bytes;
  r.keys = keys;
  r.dim = dim;
  double per_request = seconds / requests;
  r.median_us = per_request * 1e6;
  double directions = op == BenchOp::kPushPull ? 2 : 1;
  r.gbps = static_cast<double>(bytes) * directions / per_request / 1e9;
  if (keys) r.keys_per_sec = static_cast<double>(*keys) * requests / seconds;
  if (op == BenchOp::kPipelinedPush) r.req_per_sec = requests / seconds;
  if (cpu_seconds >= 0) r.cpu_us = cpu_seconds / requests * 1e6;
  return r;
}

std::string RecordsToJson(const std::vector<BenchRecord>& records) {
  std::string out = "[\n";
  for (size_t i = 0; i < records.size(); ++i) {
    const BenchRecord& r = records[i];
    out += "  {\"case\": \"" + r.kind + "\", \"transport\": \"" + r.transport + "\", \"op\": \"" +
           r.op + "\", \"bytes\": " + std::to_string(r.bytes) + ", \"keys\": " + JsonInt(r.keys) +
           ", \"dim\": " + JsonInt(r.dim) + ", \"median_us\": " + JsonNumber(r.median_us) +
           ", \"gbps\": " + JsonNumber(r.gbps) + ", \"keys_per_sec\": " +
           JsonNumber(r.keys_per_sec) + ", \"req_per_sec\": " + JsonNumber(r.req_per_sec) +
           ", \"cpu_us\": " + JsonNumber(r.cpu_us) + "}";
    out += i + 1 < records.size() ? ",\n" : "\n";
  }
  return out + "]\n";
}

Status WriteJson(const std::string& path, const std::vector<BenchRecord>& records) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return Unavailable("cannot open '" + path + "' for writing");
  f << RecordsToJson(records);
  f.close();
  if (!f) return Unavailable("cannot write '" + path + "'");
  return Status::OK();
}

void PrintTable(std::FILE* out, const std::vector<BenchRecord>& records) {
  std::fprintf(out, "%-3s %-6s %-10s %-14s | %11s %7s %8s %8s %9s | %11s %7s %8s %9s | %6s\n", "tr",
               "case", "size", "op", "median us", "GB/s", "Mkeys/s", "kreq/s", "cpu us", "raw us",
               "raw GB/s", "raw kreq", "raw cpu", "vs raw");
  for (const BenchRecord& r : records) {
    if (r.kind == "raw_zmq") continue;
    std::string size = r.keys ? CountLabel(*r.keys) + " x " + std::to_string(r.dim.value_or(0))
                              : SizeLabel(r.bytes);
    double raw_us = RawMicros(records, r);
    const BenchRecord* raw = raw_us > 0 && r.op != "pushpull" ? FindRaw(records, r, r.op) : nullptr;
    std::optional<double> raw_gbps, raw_kreq;
    if (raw_us > 0) raw_gbps = r.bytes * (r.op == "pushpull" ? 2.0 : 1.0) / raw_us / 1e3;
    if (raw) raw_kreq = raw->req_per_sec;
    std::fprintf(out, "%-3s %-6s %-10s %-14s | %11.1f %7s %8s %8s %9s | %11s %7s %8s %9s | %6s\n",
                 r.transport.c_str(), r.kind.c_str(), size.c_str(), r.op.c_str(), r.median_us,
                 Cell("%.2f", r.gbps).c_str(), Cell("%.1f", r.keys_per_sec, 1e-6).c_str(),
                 Cell("%.1f", r.req_per_sec, 1e-3).c_str(), Cell("%.1f", r.cpu_us).c_str(),
                 raw_us > 0 ? Cell("%.1f", raw_us).c_str() : "-", Cell("%.2f", raw_gbps).c_str(),
                 Cell("%.1f", raw_kreq, 1e-3).c_str(), Cell("%.1f", raw ? raw->cpu_us : std::nullopt).c_str(),
                 raw_us > 0 ? Cell("%.0f%%", 100 * raw_us / r.median_us).c_str() : "-");
  }
}

}  // namespace osprey::bench
