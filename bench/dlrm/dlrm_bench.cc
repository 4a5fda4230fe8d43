// osprey-bench-dlrm (`osprey bench dlrm`): end-to-end GPU training throughput of the
// Criteo-Kaggle-shaped DLRM through a local Osprey cluster, against the all-on-GPU PyTorch
// reference (bench/reference/dlrm_torch.py) run on the same machine in the same invocation.
//
//   osprey bench dlrm [--config configs/bench-dlrm-kaggle.yaml] [--batches 2048,16384]
//                     [--cache 1.0,0.1] [--cache-index device,host] [--gpus 1] [--steps 1000]
//                     [--runs 3] [--servers 8]
//                     [--reference bench/reference/dlrm_torch.py] [--ref-tables per-feature,fused]
//                     [--json PATH] [--set k=v]...
//
// Every case (gpus x batch x cache fraction) runs `osprey launch CONFIG` `--runs` times as a real
// cluster (coordinator, servers, one osprey-worker per GPU) and reads its --report-json. The
// table shows the median samples/s over the runs, and the step-time breakdown, cache hit rate and
// bytes per sample of the median run. Cache fraction 0 means no reuse across steps (every step
// pulls every row it uses). The reference runs once per batch size and table layout (--ref-tables:
// one nn.EmbeddingBag per feature, and one fused table holding every feature's rows, the faster
// PyTorch layout; it times several windows itself and reports their median); the table shows
// Osprey against each. When python3 or torch is missing it is reported as skipped.
//
// Exit status: 0 when every case ran, 1 when a case failed (its log directory is printed), 2 for
// bad flags.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "common/stats.h"

namespace {

using osprey::Median;

// Runs argv with stdout+stderr appended to `log`; returns the exit status (or 128 + signal).
int RunProcess(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    FILE* f = std::fopen(log.c_str(), "a");
    if (f) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The number after "key": in a flat JSON object (our own report format); NaN when absent/null.
double JsonNumber(const std::string& json, const std::string& key, size_t from = 0) {
  size_t p = json.find("\"" + key + "\": ", from);
  if (p == std::string::npos) return std::nan("");
  const char* s = json.c_str() + p + key.size() + 4;
  char* end = nullptr;
  double v = std::strtod(s, &end);
  return end == s ? std::nan("") : v;
}

std::string JsonString(const std::string& json, const std::string& key) {
  size_t p = json.find("\"" + key + "\": \"");
  if (p == std::string::npos) return "";
  p += key.size() + 5;
  size_t e = json.find('"', p);
  return e == std::string::npos ? "" : json.substr(p, e - p);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string Dir(const std::string& path) {
  size_t p = path.rfind('/');
  return p == std::string::npos ? "." : path.substr(0, p);
}

struct CaseResult {
  int gpus = 1;
  int batch = 0;
  double cache = 0;
  std::string index = "device";         // worker.cache.index
  std::vector<double> samples_per_sec;  // per run
  std::string median_json;              // report of the median run
  bool ok = true;
  std::string failure;
};

std::string Num(double v, const char* fmt) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"osprey bench dlrm: GPU DLRM training through Osprey vs an all-on-GPU PyTorch reference"};
  std::string config = "configs/bench-dlrm-kaggle.yaml";
  std::string batches = "2048,16384", caches = "1.0,0.1", gpus = "1", ref_tables = "per-feature,fused";
  std::string indexes = "device";
  int steps = 1000, runs = 3, servers = 8;
  std::string reference = "bench/reference/dlrm_torch.py", json_path, bin_dir, work_dir = "/tmp/osprey-bench-dlrm";
  std::vector<std::string> sets;
  app.add_option("--config", config, "job config of the benchmark");
  app.add_option("--batches", batches, "comma-separated batch sizes");
  app.add_option("--cache", caches, "comma-separated cache capacity fractions (0: no reuse)");
  app.add_option("--gpus", gpus, "comma-separated GPU worker counts");
  app.add_option("--cache-index", indexes,
                 "comma-separated worker.cache.index values (device, host); a case's runs alternate between them");
  app.add_option("--steps", steps, "training steps per run")->check(CLI::Range(10, 1000000));
  app.add_option("--runs", runs, "runs per case (median reported)")->check(CLI::Range(1, 100));
  app.add_option("--servers", servers, "server processes")->check(CLI::Range(1, 256));
  app.add_option("--reference", reference, "PyTorch reference script ('' to skip)");
  app.add_option("--ref-tables", ref_tables, "comma-separated table layouts of the reference (per-feature, fused)");
  app.add_option("--json", json_path, "write the results as JSON records here");
  app.add_option("--bin-dir", bin_dir, "where osprey and its binaries are (default: next to this one)");
  app.add_option("--work-dir", work_dir, "logs and reports of every run go under here");
  app.add_option("--set", sets, "extra key=value overrides for every case");
  CLI11_PARSE(app, argc, argv);
  if (bin_dir.empty()) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    bin_dir = n > 0 ? Dir(std::string(self, n)) : ".";
  }
  if (access(config.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "osprey bench dlrm: config '%s' cannot be read (run from the repository root or pass --config)\n",
                 config.c_str());
    return 2;
  }
  std::vector<int> batch_list, gpu_list;
  std::vector<double> cache_list;
  try {
    for (const auto& b : Split(batches)) batch_list.push_back(std::stoi(b));
    for (const auto& g : Split(gpus)) gpu_list.push_back(std::stoi(g));
    for (const auto& c : Split(caches)) cache_list.push_back(std::stod(c));
  } catch (const std::exception&) {
    std::fprintf(stderr, "osprey bench dlrm: --batches, --gpus and --cache take comma-separated numbers\n");
    return 2;
  }
  if (batch_list.empty() || gpu_list.empty() || cache_list.empty()) {
    std::fprintf(stderr, "osprey bench dlrm: --batches, --gpus and --cache need at least one value\n");
    return 2;
  }
  const std::vector<std::string> index_list = Split(indexes);
  for (const auto& i : index_list) {
    if (i != "device" && i != "host") {
      std::fprintf(stderr, "osprey bench dlrm: --cache-index: '%s' is neither device nor host\n", i.c_str());
      return 2;
    }
  }
  if (index_list.empty()) {
    std::fprintf(stderr, "osprey bench dlrm: --cache-index needs at least one value\n");
    return 2;
  }
  const std::vector<std::string> layouts = Split(ref_tables);
  for (const auto& l : layouts) {
    if (l != "per-feature" && l != "fused") {
      std::fprintf(stderr, "osprey bench dlrm: --ref-tables: '%s' is neither per-feature nor fused\n", l.c_str());
      return 2;
    }
  }
  RunProcess({"mkdir", "-p", work_dir}, "/dev/null");

  // The reference, once per (table layout, batch size).
  std::map<std::pair<std::string, int>, double> ref;
  std::map<std::pair<std::string, int>, std::string> ref_note;
  for (const auto& layout : layouts) {
    for (int b : batch_list) {
      const auto key = std::make_pair(layout, b);
      if (reference.empty() || access(reference.c_str(), R_OK) != 0) {
        ref_note[key] = reference.empty() ? "skipped" : "no script";
        continue;
      }
      const std::string base = work_dir + "/reference-" + layout + "-" + std::to_string(b);
      const std::string out = base + ".json", log = base + ".log";
      std::remove(out.c_str());
      std::fprintf(stderr, "reference: %s tables, batch %d ...\n", layout.c_str(), b);
      int rc = RunProcess({"python3", reference, "--batch", std::to_string(b), "--tables", layout, "--json", out}, log);
      double v = JsonNumber(ReadFile(out), "samples_per_sec");
      if (rc != 0 || !std::isfinite(v)) {
        ref_note[key] = "failed (see " + log + ")";
        continue;
      }
      ref[key] = v;
    }
  }
  // Osprey's samples/s against the reference of `layout` at `batch`, as "123%", or "n/a".
  auto vs_ref = [&](const std::string& layout, int batch, double v) {
    auto it = ref.find({layout, batch});
    return it == ref.end() ? std::string("n/a") : Num(100 * v / it->second, "%.0f%%");
  };

  // One run of case r; a failure marks r failed (its later runs are skipped).
  auto run_case = [&](CaseResult* r, std::vector<std::pair<double, std::string>>* reports, int run) {
    char name[160];
    std::snprintf(name, sizeof(name), "g%d-b%d-c%g-%s-r%d", r->gpus, r->batch, r->cache, r->index.c_str(), run);
    std::string dir = work_dir + "/" + name;
    std::string report = dir + ".json";
    std::remove(report.c_str());
    std::vector<std::string> cmd = {bin_dir + "/osprey", "launch", config, "--quiet", "--log-dir", dir,
                                    "--report-json", report, "--bin-dir", bin_dir};
    std::vector<std::string> case_sets = {
        "cluster.workers=" + std::to_string(r->gpus), "cluster.servers=" + std::to_string(servers),
        "train.batch_size=" + std::to_string(r->batch), "train.steps=" + std::to_string(steps),
        "worker.cache.capacity_fraction=" + std::to_string(r->cache), "worker.cache.capacity_rows=0",
        "worker.cache.index=" + r->index};
    case_sets.insert(case_sets.end(), sets.begin(), sets.end());
    for (const auto& s : case_sets) {
      cmd.push_back("--set");
      cmd.push_back(s);
    }
    std::fprintf(stderr, "case %s ...\n", name);
    int rc = RunProcess(cmd, dir + ".log");
    std::string json = ReadFile(report);
    double sps = JsonNumber(json, "samples_per_sec");
    if (rc != 0 || !std::isfinite(sps)) {
      r->ok = false;
      r->failure = "exit " + std::to_string(rc) + ", see " + dir + ".log and " + dir + "/";
      return;
    }
    r->samples_per_sec.push_back(sps);
    reports->emplace_back(sps, json);
  };

  std::vector<CaseResult> results;
  bool all_ok = true;
  for (int g : gpu_list) {
    for (int b : batch_list) {
      for (double c : cache_list) {
        // The indexes' runs interleave (run 0 of each, then run 1, ...), so a drifting host shows in all.
        std::vector<CaseResult> rs(index_list.size());
        std::vector<std::vector<std::pair<double, std::string>>> reports(index_list.size());
        for (size_t k = 0; k < index_list.size(); ++k) {
          rs[k].gpus = g;
          rs[k].batch = b;
          rs[k].cache = c;
          rs[k].index = index_list[k];
        }
        for (int run = 0; run < runs; ++run) {
          for (size_t k = 0; k < index_list.size(); ++k) {
            if (rs[k].ok) run_case(&rs[k], &reports[k], run);
          }
        }
        for (size_t k = 0; k < index_list.size(); ++k) {
          all_ok = all_ok && rs[k].ok;
          if (rs[k].ok && !reports[k].empty()) {
            std::sort(reports[k].begin(), reports[k].end());
            rs[k].median_json = reports[k][reports[k].size() / 2].second;
          }
          results.push_back(rs[k]);
        }
      }
    }
  }

  // The table.
  std::printf("\nosprey bench dlrm: %s, %d steps per run, median of %d runs, %d servers\n", config.c_str(), steps,
              runs, servers);
  std::printf("%-5s %-6s %-6s %-6s %12s %9s %9s %7s %8s %6s %6s %8s %8s %-23s %6s %9s %s\n", "gpus", "batch",
              "cache", "index", "samples/s", "vs fused", "vs perfeat", "wait%", "compute%", "push%", "nccl%",
              "cache ms", "pull ms", "gpu ms plan/pull/gat/fb", "hit%", "B/sample", "device");
  for (const auto& [key, v] : ref) {
    std::printf("%-5s %-6d %-6s %12.0f   PyTorch reference, all tables on the GPU, %s tables\n", "ref", key.second,
                "all", v, key.first.c_str());
  }
  for (const auto& [key, note] : ref_note) {
    std::printf("%-5s %-6d reference (%s tables) %s\n", "ref", key.second, key.first.c_str(), note.c_str());
  }
  std::string records;
  for (const auto& r : results) {
    if (!r.ok) {
      std::printf("%-5d %-6d %-6g %-6s FAILED: %s\n", r.gpus, r.batch, r.cache, r.index.c_str(), r.failure.c_str());
      continue;
    }
    const std::string& j = r.median_json;
    double med = Median(r.samples_per_sec);
    double wait = JsonNumber(j, "time_wait_input"), comp = JsonNumber(j, "time_compute");
    double push = JsonNumber(j, "time_push"), nccl = JsonNumber(j, "time_nccl");
    double total = wait + comp + push + nccl;
    auto pct = [&](double v) { return total > 0 ? Num(100 * v / total, "%.0f") : std::string("n/a"); };
    // The planner's cache stage and the pullers' pull stage, ms per step (each a per-worker total).
    const double per_step = 1000.0 / steps;
    // The stages' device time per step (CUDA events): plan stream, a puller's stream, gather and
    // forward+backward on the compute stream.
    std::string gpu_ms, device_fields;
    for (const char* k : {"device_plan", "device_pull", "device_gather", "device_compute"}) {
      gpu_ms += (gpu_ms.empty() ? "" : "/") + Num(per_step * JsonNumber(j, k), "%.2f");
      device_fields += "\"" + std::string(k) + "\": " + Num(JsonNumber(j, k), "%.3f") + ", ";
    }
    std::printf("%-5d %-6d %-6g %-6s %12.0f %9s %9s %7s %8s %6s %6s %8s %8s %-23s %6s %9s %s\n", r.gpus, r.batch, r.cache,
                r.index.c_str(), med, vs_ref("fused", r.batch, med).c_str(),
                vs_ref("per-feature", r.batch, med).c_str(), pct(wait).c_str(), pct(comp).c_str(), pct(push).c_str(),
                pct(nccl).c_str(), Num(per_step * JsonNumber(j, "prefetch_cache"), "%.2f").c_str(),
                Num(per_step * JsonNumber(j, "prefetch_pull"), "%.2f").c_str(), gpu_ms.c_str(),
                Num(100 * JsonNumber(j, "cache_hit_rate"), "%.1f").c_str(),
                Num(JsonNumber(j, "bytes_per_sample"), "%.0f").c_str(), JsonString(j, "device").c_str());
    std::string runs_list;
    for (double v : r.samples_per_sec) runs_list += (runs_list.empty() ? "" : ", ") + Num(v, "%.0f");
    char rec[1536];
    std::snprintf(rec, sizeof(rec),
                  "  {\"case\": \"osprey\", \"gpus\": %d, \"batch\": %d, \"cache_fraction\": %g, \"cache_index\": \"%s\", "
                  "\"samples_per_sec\": %s, \"runs\": [%s], \"reference_samples_per_sec\": %s, "
                  "\"fused_reference_samples_per_sec\": %s, "
                  "\"time_wait_input\": %s, \"time_compute\": %s, \"time_push\": %s, \"time_nccl\": %s, "
                  "\"prefetch_read\": %s, \"prefetch_dedupe\": %s, \"prefetch_cache\": %s, \"prefetch_pull\": %s, "
                  "%s"
                  "\"cache_hit_rate\": %s, \"bytes_per_sample\": %s, \"device\": \"%s\"}",
                  r.gpus, r.batch, r.cache, r.index.c_str(), Num(med, "%.0f").c_str(), runs_list.c_str(),
                  ref.count({"per-feature", r.batch}) ? Num(ref[{"per-feature", r.batch}], "%.0f").c_str() : "null",
                  ref.count({"fused", r.batch}) ? Num(ref[{"fused", r.batch}], "%.0f").c_str() : "null",
                  Num(wait, "%.3f").c_str(),
                  Num(comp, "%.3f").c_str(), Num(push, "%.3f").c_str(), Num(nccl, "%.3f").c_str(),
                  Num(JsonNumber(j, "prefetch_read"), "%.3f").c_str(),
                  Num(JsonNumber(j, "prefetch_dedupe"), "%.3f").c_str(),
                  Num(JsonNumber(j, "prefetch_cache"), "%.3f").c_str(),
                  Num(JsonNumber(j, "prefetch_pull"), "%.3f").c_str(), device_fields.c_str(),
                  Num(JsonNumber(j, "cache_hit_rate"), "%.4f").c_str(),
                  Num(JsonNumber(j, "bytes_per_sample"), "%.1f").c_str(), JsonString(j, "device").c_str());
    records += (records.empty() ? "" : ",\n") + std::string(rec);
  }
  for (const auto& [key, v] : ref) {
    char rec[256];
    std::snprintf(rec, sizeof(rec),
                  "  {\"case\": \"torch_reference\", \"tables\": \"%s\", \"batch\": %d, \"samples_per_sec\": %.0f}",
                  key.first.c_str(), key.second, v);
    records += (records.empty() ? "" : ",\n") + std::string(rec);
  }
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "[\n" << records << "\n]\n";
    if (!out) {
      std::fprintf(stderr, "osprey bench dlrm: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return all_ok ? 0 : 1;
}
