// osprey-bench-codec: per codec and size, the median time of one encode (with error feedback) or
// decode-add, its memory throughput, the selected count relative to k, and a baseline measured in
// the same run (CPU: std::nth_element on |g|; CUDA: torch.topk, see torch_topk.py).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "bench/codec/bench_report.h"
#include "common/codec/codec.h"
#include "common/codec/codec_math.h"
#include "common/codec/row_cast.h"

namespace osprey::bench {
namespace {

using Clock = std::chrono::steady_clock;

// setup() runs untimed before every call of fn(); warm-up calls are not recorded.
double TimeMs(int warmup, int runs, const std::function<void()>& setup, const std::function<void()>& fn) {
  std::vector<double> ms;
  for (int i = 0; i < warmup + runs; ++i) {
    setup();
    const auto start = Clock::now();
    fn();
    const double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (i >= warmup) ms.push_back(elapsed);
  }
  return Median(ms);
}

codec::CodecConfig Config(const std::string& type, double density, const std::string& method = "exact") {
  codec::CodecConfig c;
  c.type = type;
  c.density = density;
  c.topk_method = method;
  c.error_feedback = true;
  return c;
}

// Times one EF encode of g (residual reset to zero before each call) and records the row.
codec::Encoded TimeEncode(const std::string& name, const codec::CodecConfig& config, const std::vector<float>& g,
                          std::optional<double> density, const BenchOptions& o, std::vector<BenchRow>* rows) {
  auto made = codec::MakeCodec(config);
  codec::Encoded e;
  if (!made.ok()) {
    rows->push_back(BenchRow{name, "cpu", g.size(), density, 0, 0, {}, {}, "skipped: " + made.status().ToString()});
    return e;
  }
  codec::CodecState state;
  Status status;
  const double ms = TimeMs(o.warmup, o.runs, [&] { state.residual.assign(g.size(), 0.0f); },
                           [&] { status = (*made)->Encode(g.data(), g.size(), &state, &e); });
  BenchRow row{name, "cpu", g.size(), density, ms, 12.0 * g.size() + e.payload.size()};
  if (!status.ok()) row.note = "error: " + status.ToString();
  if (density) row.selected_over_k = e.meta.count / static_cast<double>(codec::MakeTargets(g.size(), *density, 0).k);
  rows->push_back(row);
  return e;
}

void TimeDecode(const std::string& name, const codec::Encoded& e, size_t n, std::optional<double> density,
                const BenchOptions& o, std::vector<BenchRow>* rows) {
  std::vector<float> dst(n, 0.0f);
  const double ms = TimeMs(o.warmup, o.runs, [] {}, [&] { (void)codec::DecodeAddFrame(e.view(), dst.data(), n, 1.0f); });
  const bool sparse = e.meta.codec == codec::CodecId::kTopK;
  // Sparse: read the payload, read+write one float per pair. Dense: payload plus a dense RMW.
  const double bytes = e.payload.size() + 8.0 * (sparse ? e.meta.count : n);
  rows->push_back(BenchRow{name, "cpu", n, density, ms, bytes});
}

// The sparse-row casts (common/codec/row_cast.h: what a worker does to every pushed and pulled row
// with tables[].codec / pull_codec fp16 or bf16), against their scalar definition one value at a
// time in the same run (the baseline column).
void TimeRowCasts(const std::vector<float>& g, const BenchOptions& o, std::vector<BenchRow>* rows) {
  namespace rc = codec::row_cast_internal;
  const size_t n = g.size();
  std::vector<uint16_t> half(n);
  std::vector<float> wide(n);
  for (codec::ValueType type : {codec::ValueType::kFp16, codec::ValueType::kBf16}) {
    const bool fp16 = type == codec::ValueType::kFp16;
    uint8_t* bytes = reinterpret_cast<uint8_t*>(half.data());
    const double cast = TimeMs(o.warmup, o.runs, [] {}, [&] { codec::CastRowValues(g.data(), n, type, bytes); });
    const double cast_ref = TimeMs(o.warmup, o.runs, [] {}, [&] {
      for (size_t i = 0; i < n; ++i) half[i] = fp16 ? rc::HalfReference(g[i]) : rc::Bf16Reference(g[i]);
    });
    const double widen = TimeMs(o.warmup, o.runs, [] {}, [&] { codec::WidenRowValues(bytes, n, type, wide.data()); });
    const double widen_ref = TimeMs(o.warmup, o.runs, [] {}, [&] {
      for (size_t i = 0; i < n; ++i) wide[i] = fp16 ? codec::HalfBitsToFloat(half[i]) : codec::Bf16BitsToFloat(half[i]);
    });
    const std::string suffix = fp16 ? (rc::HaveF16c() ? "fp16" : "fp16 (no f16c)") : "bf16";
    rows->push_back(BenchRow{"row_cast_" + suffix, "cpu", n, {}, cast, 6.0 * n, {}, cast_ref});
    rows->push_back(BenchRow{"row_widen_" + suffix, "cpu", n, {}, widen, 6.0 * n, {}, widen_ref});
  }
}

void RunCpuSize(size_t n, const BenchOptions& o, std::vector<BenchRow>* rows) {
  const std::vector<float> g = MakeGradient(n, n);
  TimeEncode("ef_fp16", Config("fp16", 1), g, {}, o, rows);
  TimeEncode("ef_bf16", Config("bf16", 1), g, {}, o, rows);
  TimeRowCasts(g, o, rows);
  const codec::Encoded onebit = TimeEncode("ef_onebit", Config("onebit", 1), g, {}, o, rows);
  TimeDecode("decode_onebit", onebit, n, {}, o, rows);
  for (double density : o.densities) {
    // Baseline: the obvious selection, std::nth_element over a copy of |g| (no error feedback).
    std::vector<float> mags(n);
    const size_t k = codec::MakeTargets(n, density, 0).k;
    const double baseline = TimeMs(o.warmup, o.runs, [] {}, [&] {
      for (size_t i = 0; i < n; ++i) mags[i] = std::fabs(g[i]);
      std::nth_element(mags.begin(), mags.begin() + (k - 1), mags.end(), std::greater<float>());
    });
    const size_t first = rows->size();
    const codec::Encoded exact = TimeEncode("ef_topk_exact", Config("topk", density), g, density, o, rows);
    TimeEncode("ef_topk_sample", Config("topk", density, "sample"), g, density, o, rows);
    TimeEncode("ef_topk_histogram", Config("topk", density, "histogram"), g, density, o, rows);
    for (size_t i = first; i < rows->size(); ++i) (*rows)[i].baseline_ms = baseline;
    TimeEncode("ef_randomk", Config("randomk", density), g, density, o, rows);
    TimeDecode("decode_topk", exact, n, density, o, rows);
  }
}

std::vector<double> ParseList(const std::string& text, const char* flag, bool* ok) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v > 0)) {
      std::fprintf(stderr, "%s: \"%s\" is not a positive number\n", flag, item.c_str());
      *ok = false;
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

// Gradient-like values: Gaussian (Box-Muller over xorshift) with 1% of elements 30x larger.
std::vector<float> MakeGradient(size_t n, uint64_t seed) {
  std::vector<float> g(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto uniform = [&] {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return static_cast<double>((s * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
  };
  for (size_t i = 0; i < n; ++i) {
    const double normal = std::sqrt(-2.0 * std::log(uniform() + 1e-300)) * std::cos(6.283185307179586 * uniform());
    g[i] = static_cast<float>(normal * (uniform() < 0.01 ? 30e-3 : 1e-3));
  }
  return g;
}

void RunCpuBench(const BenchOptions& o, std::vector<BenchRow>* rows) {
  for (double size : o.sizes) {
    const size_t n = static_cast<size_t>(size);
    if (n > o.cpu_max_n) {
      rows->push_back(BenchRow{"all", "cpu", n, {}, 0, 0, {}, {}, "skipped: n > --cpu-max-n"});
      continue;
    }
    RunCpuSize(n, o, rows);
  }
}

}  // namespace osprey::bench

int main(int argc, char** argv) {
  using osprey::bench::BenchOptions;
  CLI::App app{"Osprey codec benchmark: encode/decode time, throughput and selected count per codec and size"};
  BenchOptions o;
  std::string sizes = "1e6,2.5e7,1e8,4e8";
  std::string densities = "0.01,0.001";
  app.add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--json", o.json_path, "write the rows as a JSON array to this file");
  app.add_option("--sizes", sizes, "comma-separated element counts");
  app.add_option("--densities", densities, "comma-separated top-k densities");
  app.add_option("--runs", o.runs, "timed runs per case (median reported); default 5 cpu, 50 cuda");
  app.add_option("--warmup", o.warmup, "untimed runs per case; default 1 cpu, 5 cuda");
  app.add_option("--cpu-max-n", o.cpu_max_n, "larger sizes are skipped on cpu");
  o.torch_script = "bench/codec/torch_topk.py";
#ifdef OSPREY_SOURCE_DIR
  if (FILE* f = std::fopen(o.torch_script.c_str(), "r")) {
    std::fclose(f);
  } else {
    o.torch_script = OSPREY_SOURCE_DIR "/bench/codec/torch_topk.py";
  }
#endif
  app.add_option("--torch-script", o.torch_script, "torch.topk baseline script for cuda; empty disables it");
  CLI11_PARSE(app, argc, argv);
  bool ok = true;
  o.sizes = osprey::bench::ParseList(sizes, "--sizes", &ok);
  o.densities = osprey::bench::ParseList(densities, "--densities", &ok);
  for (double d : o.densities) {
    if (d > 1.0) {
      std::fprintf(stderr, "--densities: %g is above 1\n", d);
      ok = false;
    }
  }
  if (!ok) return 2;
  const bool cuda = o.device == "cuda";
  if (o.runs <= 0) o.runs = cuda ? 50 : 5;
  if (o.warmup <= 0) o.warmup = cuda ? 5 : 1;
  std::vector<osprey::bench::BenchRow> rows;
  if (cuda) {
#ifdef OSPREY_BENCH_CUDA
    const osprey::Status st = osprey::bench::RunCudaBench(o, &rows);
    if (!st.ok()) {
      std::fprintf(stderr, "cuda benchmark failed: %s\n", st.ToString().c_str());
      osprey::bench::PrintTable(rows);
      return 1;
    }
#else
    std::fprintf(stderr, "--device cuda: this binary was built without CUDA\n");
    return 2;
#endif
  } else {
    osprey::bench::RunCpuBench(o, &rows);
  }
  osprey::bench::PrintTable(rows);
  if (!o.json_path.empty()) {
    const osprey::Status st = osprey::bench::WriteJson(o.json_path, rows);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
