// osprey-bench-row-cache: RowCache::Plan and ShardedRowCache::Plan over the distinct keys of
// Zipf-distributed steps.
//
// Every step draws Zipf(alpha) ids over [0, --keys) (ranks scattered by an IndexPermutation, as
// the synthetic data does) until it has --distinct distinct ids: the keys a deduped batch hands to
// the planner. All steps are generated before timing. Per case (capacity as a fraction of the key
// space x staleness bound x planner: RowCache, then ShardedRowCache at each --shards P) it prints
// the median / min / max wall time of one Plan over --steps steps, each case run --repeats times
// on a fresh cache (the median is over all steps x repeats plans), keys planned per second, the
// hit rate of the steps after the first (the first one starts cold) and evictions per step; cpu_ms
// is the median process CPU time of a Plan (all threads, barrier spinning included), which a
// loaded machine's preemptions do not inflate (Mkeys/s is from the wall-clock median); speedup is
// RowCache's median over the case's. The baseline,
// timed in the same run, is an unbounded std::unordered_map find-or-insert of the same keys: the
// least any planner does per key, with no eviction, pinning or staleness.
//
// Usage: osprey-bench-row-cache [--keys N] [--distinct D] [--steps S] [--alpha A] [--pinned P]
//                               [--capacities 0.1,1] [--bounds 0,4,-1] [--shards 1,2,4,8]
//                               [--repeats R] [--seed X] [--json PATH]
//   --bounds: staleness bounds to run; -1 means unbounded. --shards: ShardedRowCache's P values
//   (empty string: none).
#include <algorithm>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "worker/cache/row_cache.h"
#include "worker/cache/sharded_row_cache.h"
#include "worker/data/random.h"
#include "worker/data/zipf.h"
#include "common/stats.h"

namespace osprey::worker {
namespace {

struct Options {
  uint64_t keys = 4000000;
  uint64_t distinct = 150000;
  int steps = 50;
  double alpha = 1.05;
  int pinned = 2;
  std::vector<double> capacities = {0.1, 1.0};
  std::vector<int64_t> bounds = {0, 4, -1};
  std::vector<int> shards = {1, 2, 4, 8};
  int repeats = 3;
  uint64_t seed = 1;
  std::string json;
};

struct Result {
  std::string name;
  bool is_cache = false;  // a RowCache or ShardedRowCache case (the baseline has no bound)
  double speedup = 0;     // RowCache's median_ms / this case's, same capacity and bound
  uint64_t capacity = 0;  // 0: unbounded
  int64_t bound = -1;     // -1: unbounded
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double cpu_ms = 0;  // median thread CPU time: what a loaded machine's preemptions do not inflate
  double hit_rate = 0, evictions_per_step = 0;
  std::string error;
};

double NowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ProcessCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// The steps' distinct keys; *draws gets the mean number of Zipf draws a step took.
std::vector<std::vector<uint64_t>> MakeSteps(const Options& o, double* draws) {
  const data::ZipfSampler zipf(o.keys, o.alpha);
  const data::IndexPermutation scatter(o.keys, o.seed);
  data::Rng rng(o.seed);
  std::vector<int> seen(o.keys, -1);
  std::vector<std::vector<uint64_t>> steps(o.steps);
  const uint64_t want = std::min(o.distinct, o.keys);
  uint64_t total = 0;
  for (int s = 0; s < o.steps; ++s) {
    steps[s].reserve(want);
    while (steps[s].size() < want) {
      const uint64_t id = scatter(zipf.Sample([&] { return rng.NextUniform(); }));
      ++total;
      if (seen[id] != s) {
        seen[id] = s;
        steps[s].push_back(id);
      }
    }
  }
  *draws = static_cast<double>(total) / o.steps;
  return steps;
}

// Plans every step on a fresh cache, `repeats` times; appends the plans' times to *ms / *cpu.
template <typename Cache>
Status TimePlans(const std::vector<std::vector<uint64_t>>& steps, Cache* cache, std::vector<double>* ms,
                 std::vector<double>* cpu, RowCacheStats* after_first) {
  std::vector<int32_t> slots;
  std::vector<uint64_t> miss_keys;
  std::vector<int32_t> miss_slots;
  for (size_t s = 0; s < steps.size(); ++s) {
    slots.resize(steps[s].size());
    const double c0 = ProcessCpuMs(), t0 = NowMs();
    const Status st = cache->Plan(static_cast<int64_t>(s), steps[s].data(), steps[s].size(), slots.data(), &miss_keys,
                                  &miss_slots);
    ms->push_back(NowMs() - t0);
    cpu->push_back(ProcessCpuMs() - c0);
    if (!st.ok()) return st.WithContext("step " + std::to_string(s));
    if (s == 0) *after_first = cache->stats();
  }
  return Status::OK();
}

// shards 0: RowCache; P >= 1: ShardedRowCache with P shards.
Result RunCache(const std::vector<std::vector<uint64_t>>& steps, uint64_t capacity, int64_t bound, int pinned,
                int shards, int repeats) {
  Result r;
  r.name = shards == 0 ? "row_cache" : "sharded P=" + std::to_string(shards);
  r.is_cache = true;
  r.capacity = capacity;
  r.bound = bound;
  const RowCacheOptions options{capacity, bound < 0 ? INT64_MAX / 2 : bound, pinned};
  std::vector<double> ms, cpu;
  RowCacheStats after_first{}, end{};
  for (int rep = 0; rep < repeats; ++rep) {
    Status st;
    if (shards == 0) {
      auto made = RowCache::Make(options);
      st = made.ok() ? TimePlans(steps, made->get(), &ms, &cpu, &after_first) : made.status();
      if (st.ok()) end = (*made)->stats();
    } else {
      auto made = ShardedRowCache::Make(options, shards);
      st = made.ok() ? TimePlans(steps, made->get(), &ms, &cpu, &after_first) : made.status();
      if (st.ok()) end = (*made)->stats();
    }
    if (!st.ok()) {
      r.error = st.ToString();
      return r;
    }
  }
  r.median_ms = Median(ms);
  r.cpu_ms = Median(cpu);
  r.min_ms = *std::min_element(ms.begin(), ms.end());
  r.max_ms = *std::max_element(ms.begin(), ms.end());
  const uint64_t lookups = end.lookups - after_first.lookups;  // the last repeat's
  r.hit_rate = lookups ? static_cast<double>(end.hits - after_first.hits) / lookups : 0.0;
  r.evictions_per_step = static_cast<double>(end.evictions) / steps.size();
  return r;
}

// Baseline: an unbounded std::unordered_map that only finds or inserts.
Result RunUnorderedMap(const std::vector<std::vector<uint64_t>>& steps, uint64_t key_space) {
  Result r;
  r.name = "unordered_map";
  std::unordered_map<uint64_t, int32_t> map;
  map.reserve(std::min<uint64_t>(key_space, steps.size() * (steps.empty() ? 0 : steps[0].size())));
  std::vector<int32_t> slots;
  std::vector<double> ms, cpu;
  uint64_t hits = 0, lookups = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    slots.resize(steps[s].size());
    uint64_t step_hits = 0;
    const double c0 = ProcessCpuMs(), t0 = NowMs();
    for (size_t i = 0; i < steps[s].size(); ++i) {
      auto [it, inserted] = map.try_emplace(steps[s][i], static_cast<int32_t>(map.size()));
      slots[i] = it->second;
      step_hits += !inserted;
    }
    ms.push_back(NowMs() - t0);
    cpu.push_back(ProcessCpuMs() - c0);
    if (s > 0) hits += step_hits, lookups += steps[s].size();
  }
  r.median_ms = Median(ms);
  r.cpu_ms = Median(cpu);
  r.min_ms = *std::min_element(ms.begin(), ms.end());
  r.max_ms = *std::max_element(ms.begin(), ms.end());
  r.hit_rate = lookups ? static_cast<double>(hits) / lookups : 0.0;
  return r;
}

template <typename T>
std::vector<T> ParseList(const char* text) {
  std::vector<T> out;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    out.push_back(static_cast<T>(std::strtod(p, &end)));
    if (end == p) break;
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (v == nullptr) return false;
    if (a == "--keys") o->keys = std::strtoull(v, nullptr, 10);
    else if (a == "--distinct") o->distinct = std::strtoull(v, nullptr, 10);
    else if (a == "--steps") o->steps = std::atoi(v);
    else if (a == "--alpha") o->alpha = std::atof(v);
    else if (a == "--pinned") o->pinned = std::atoi(v);
    else if (a == "--capacities") o->capacities = ParseList<double>(v);
    else if (a == "--bounds") o->bounds = ParseList<int64_t>(v);
    else if (a == "--shards") o->shards = ParseList<int>(v);
    else if (a == "--repeats") o->repeats = std::atoi(v);
    else if (a == "--seed") o->seed = std::strtoull(v, nullptr, 10);
    else if (a == "--json") o->json = v;
    else return false;
    ++i;
  }
  return o->keys >= 1 && o->steps >= 1 && o->alpha > 0 && o->repeats >= 1;
}

void Print(const Result& r, const Options& o, uint64_t keys_per_step) {
  char capacity[64], bound[32];
  if (r.capacity == 0) std::snprintf(capacity, sizeof capacity, "unbounded");
  else std::snprintf(capacity, sizeof capacity, "%llu (%.0f%%)", static_cast<unsigned long long>(r.capacity),
                     100.0 * r.capacity / o.keys);
  if (!r.is_cache) std::snprintf(bound, sizeof bound, "-");
  else if (r.bound < 0) std::snprintf(bound, sizeof bound, "inf");
  else std::snprintf(bound, sizeof bound, "%lld", static_cast<long long>(r.bound));
  if (!r.error.empty()) {
    std::printf("%-14s %-18s %5s  %s\n", r.name.c_str(), capacity, bound, r.error.c_str());
    return;
  }
  char speedup[32];
  if (r.is_cache) std::snprintf(speedup, sizeof speedup, "%.2f", r.speedup);
  else std::snprintf(speedup, sizeof speedup, "-");
  std::printf("%-14s %-18s %5s %10.3f %8.3f %8.3f %8.3f %9.1f %9.4f %11.0f %8s\n", r.name.c_str(), capacity, bound,
              r.median_ms, r.min_ms, r.max_ms, r.cpu_ms, r.median_ms > 0 ? keys_per_step / r.median_ms / 1e3 : 0.0,
              r.hit_rate, r.evictions_per_step, speedup);
}

void WriteJson(const std::vector<Result>& results, const Options& o, uint64_t keys_per_step) {
  FILE* f = std::fopen(o.json.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "osprey-bench-row-cache: cannot write %s\n", o.json.c_str());
    return;
  }
  std::fprintf(f, "[\n");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    std::fprintf(f,
                 "  {\"case\": \"%s\", \"key_space\": %llu, \"keys_per_step\": %llu, \"capacity\": %llu, "
                 "\"staleness_bound\": %lld, \"median_ms\": %.4f, \"min_ms\": %.4f, \"max_ms\": %.4f, \"cpu_ms\": %.4f, "
                 "\"hit_rate\": %.5f, \"evictions_per_step\": %.1f, \"speedup\": %.3f, \"error\": \"%s\"}%s\n",
                 r.name.c_str(), static_cast<unsigned long long>(o.keys), static_cast<unsigned long long>(keys_per_step),
                 static_cast<unsigned long long>(r.capacity), static_cast<long long>(r.bound), r.median_ms, r.min_ms,
                 r.max_ms, r.cpu_ms, r.hit_rate, r.evictions_per_step, r.speedup, r.error.c_str(),
                 i + 1 < results.size() ? "," : "");
  }
  std::fprintf(f, "]\n");
  std::fclose(f);
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: osprey-bench-row-cache [--keys N] [--distinct D] [--steps S] [--alpha A] [--pinned P]\n"
                 "                              [--capacities 0.1,1] [--bounds 0,4,-1] [--shards 1,2,4,8]\n"
                 "                              [--repeats R] [--seed X] [--json PATH]\n");
    return 2;
  }
  double draws = 0;
  const auto steps = MakeSteps(o, &draws);
  const uint64_t keys_per_step = steps[0].size();
  std::printf("# RowCache::Plan: key space %llu, %llu distinct keys per step (%.0f Zipf(%.2f) draws), %d steps, "
              "pinned_steps %d\n",
              static_cast<unsigned long long>(o.keys), static_cast<unsigned long long>(keys_per_step), draws, o.alpha,
              o.steps, o.pinned);
  std::printf("# median/min/max of %d runs x %d plans; hit rate over steps 1..%d; cpu_ms: process CPU, all threads; "
              "speedup: row_cache median / case median; baseline: unbounded std::unordered_map find-or-insert of the "
              "same keys\n",
              o.repeats, o.steps, o.steps - 1);
  std::printf("%-14s %-18s %5s %10s %8s %8s %8s %9s %9s %11s %8s\n", "case", "capacity", "bound", "median_ms",
              "min_ms", "max_ms", "cpu_ms", "Mkeys/s", "hit_rate", "evict/step", "speedup");
  std::vector<Result> results;
  for (double fraction : o.capacities) {
    const uint64_t capacity = std::max<uint64_t>(1, static_cast<uint64_t>(fraction * o.keys + 0.5));
    for (int64_t bound : o.bounds) {
      results.push_back(RunCache(steps, capacity, bound, o.pinned, 0, o.repeats));
      const double single_ms = results.back().median_ms;
      results.back().speedup = 1.0;
      Print(results.back(), o, keys_per_step);
      for (int shards : o.shards) {
        results.push_back(RunCache(steps, capacity, bound, o.pinned, shards, o.repeats));
        if (results.back().median_ms > 0) results.back().speedup = single_ms / results.back().median_ms;
        Print(results.back(), o, keys_per_step);
      }
    }
  }
  results.push_back(RunUnorderedMap(steps, o.keys));
  Print(results.back(), o, keys_per_step);
  if (!o.json.empty()) WriteJson(results, o, keys_per_step);
  return 0;
}

}  // namespace
}  // namespace osprey::worker

int main(int argc, char** argv) { return osprey::worker::Main(argc, argv); }
