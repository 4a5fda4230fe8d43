#include "bench/codec/bench_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace osprey::bench {
namespace {

std::string Num(const std::optional<double>& v, const char* fmt) {
  if (!v) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, *v);
  return buf;
}

std::string JsonNum(const std::optional<double>& v) {
  if (!v) return "null";
  std::ostringstream os;
  os.precision(9);
  os << *v;
  return os.str();
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

void PrintTable(const std::vector<BenchRow>& rows) {
  std::printf("%-22s %-5s %12s %8s %11s %9s %8s %12s %8s  %s\n", "codec", "dev", "n", "density", "median_ms", "GB/s",
              "sel/k", "baseline_ms", "speedup", "note");
  for (const BenchRow& r : rows) {
    const bool timed = r.note.rfind("skipped", 0) != 0;
    std::optional<double> speedup;
    if (r.baseline_ms && r.median_ms > 0) speedup = *r.baseline_ms / r.median_ms;
    std::printf("%-22s %-5s %12zu %8s %11s %9s %8s %12s %8s  %s\n", r.codec.c_str(), r.device.c_str(), r.n,
                Num(r.density, "%.4g").c_str(), timed ? Num(r.median_ms, "%.4f").c_str() : "-",
                timed ? Num(r.gbps(), "%.1f").c_str() : "-", Num(r.selected_over_k, "%.4f").c_str(),
                Num(r.baseline_ms, "%.4f").c_str(), Num(speedup, "%.2fx").c_str(), r.note.c_str());
  }
  std::fflush(stdout);
}

Status WriteJson(const std::string& path, const std::vector<BenchRow>& rows) {
  std::ofstream out(path);
  if (!out) return Unavailable("cannot open " + path + " for writing");
  out << "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& r = rows[i];
    const bool timed = r.note.rfind("skipped", 0) != 0;
    out << "  {\"codec\": " << JsonString(r.codec) << ", \"device\": " << JsonString(r.device) << ", \"n\": " << r.n
        << ", \"density\": " << JsonNum(r.density)
        << ", \"median_ms\": " << (timed ? JsonNum(r.median_ms) : "null")
        << ", \"gbps\": " << (timed ? JsonNum(r.gbps()) : "null")
        << ", \"selected_over_k\": " << JsonNum(r.selected_over_k) << ", \"baseline_ms\": " << JsonNum(r.baseline_ms)
        << ", \"note\": " << JsonString(r.note) << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  out << "]\n";
  if (!out) return Unavailable("write to " + path + " failed");
  return Status::OK();
}

}  // namespace osprey::bench
