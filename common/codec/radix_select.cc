#include "common/codec/radix_select.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/codec/codec_config.h"

namespace osprey::codec {
namespace {

uint32_t IndexAt(const uint32_t* indices, size_t i) { return indices ? indices[i] : static_cast<uint32_t>(i); }

// Fully resolved key with too many ties: take the lowest indices, by the same 8-bit index digits
// the GPU uses, so the rule (not just the set) matches.
uint32_t ResolveTies(const uint32_t* keys, const uint32_t* indices, size_t m, uint32_t key, uint64_t need) {
  uint32_t prefix = 0;
  std::vector<uint64_t> hist(kTieBins);
  for (int level = 0; level < kNumTieLevels; ++level) {
    std::fill(hist.begin(), hist.end(), 0);
    const int shift = TieDigitShift(level);
    for (size_t i = 0; i < m; ++i) {
      const uint32_t index = IndexAt(indices, i);
      if (keys[i] == key && IndexMatchesPrefix(index, prefix, level)) ++hist[(index >> shift) & 0xFFu];
    }
    uint64_t below = 0;
    for (uint32_t b = 0; b < kTieBins; ++b) {
      if (below + hist[b] >= need) {
        uint32_t tie_index = 0;
        if (DecideTieLevel(level, prefix, b, below, hist[b], &need, &prefix, &tie_index)) return tie_index;
        break;
      }
      below += hist[b];
    }
  }
  return UINT32_MAX;  // unreachable: the last level always settles
}

}  // namespace

SelectTargets MakeTargets(size_t n, double density, double tolerance) {
  SelectTargets t;
  const double k = std::llround(density * static_cast<double>(n));
  t.k = std::clamp<uint64_t>(static_cast<uint64_t>(std::max(k, 1.0)), 1, n);
  const uint64_t slack = static_cast<uint64_t>(std::floor(static_cast<double>(t.k) * tolerance));
  t.k_lo = std::max<uint64_t>(1, t.k - std::min(slack, t.k));
  t.k_hi = std::min<uint64_t>(n, t.k + slack);
  return t;
}

Selection SelectExact(const float* x, size_t n, uint64_t k, std::vector<uint32_t>* scratch) {
  Selection s;
  if (k >= n) {
    s.count = n;
    return s;  // key 0, window 0: everything
  }
  scratch->resize(n);
  for (size_t i = 0; i < n; ++i) (*scratch)[i] = MagnitudeKey(x[i]);
  auto kth = scratch->begin() + static_cast<std::ptrdiff_t>(k - 1);
  std::nth_element(scratch->begin(), kth, scratch->end(), std::greater<uint32_t>());
  s.key = *kth;
  // Elements before kth are >= key; count those strictly greater to know how many ties to take.
  const uint64_t greater = std::count_if(scratch->begin(), kth, [&](uint32_t v) { return v > s.key; });
  uint64_t ties = k - greater;
  for (size_t i = 0; i < n && ties > 0; ++i) {
    if (MagnitudeKey(x[i]) == s.key && --ties == 0) s.tie_index = static_cast<uint32_t>(i);
  }
  s.count = k;
  return s;
}

Selection RadixSelect(const uint32_t* keys, const uint32_t* indices, size_t m, uint32_t window_lo,
                      const SelectTargets& t) {
  Selection s;
  s.window_lo = window_lo;
  std::vector<uint64_t> hist(kMaxDigitBins);
  uint32_t prefix = 0;
  uint64_t count_above = 0;
  for (int level = 0; level < kNumKeyLevels; ++level) {
    const int bins = 1 << KeyDigitBits(level);
    const int shift = KeyDigitShift(level);
    std::fill(hist.begin(), hist.begin() + bins, 0);
    uint64_t total = 0;
    for (size_t i = 0; i < m; ++i) {
      if (keys[i] >= window_lo && KeyMatchesPrefix(keys[i], prefix, level)) {
        ++hist[(keys[i] >> shift) & static_cast<uint32_t>(bins - 1)];
        ++total;
      }
    }
    if (level == 0 && total <= t.k) {  // not more than k in the window: take them all
      s.key = window_lo;
      s.count = total;
      return s;
    }
    // Boundary bin: scanning from the top, the bin where the count reaches k.
    uint64_t above = 0;
    int b = bins - 1;
    while (count_above + above + hist[b] < t.k) above += hist[b--];
    const KeyLevelResult r = DecideKeyLevel(level, prefix, static_cast<uint32_t>(b), count_above, above, hist[b], t);
    if (r.kind == KeyLevelResult::kDone) {
      s.key = r.key;
      s.count = r.count;
      return s;
    }
    if (r.kind == KeyLevelResult::kTies) {
      s.key = r.key;
      s.tie_index = ResolveTies(keys, indices, m, r.key, t.k - r.count);
      s.count = t.k;
      return s;
    }
    prefix = r.next_prefix;
    count_above = r.count;
  }
  return s;  // unreachable: the last level is kDone or kTies
}

SamplePlan MakeSamplePlan(size_t n, const SelectTargets& t, double sample_rate, double tolerance) {
  SamplePlan p;
  const double wanted = std::ceil(sample_rate * static_cast<double>(n));
  p.samples = std::min<uint64_t>(n, std::max<uint64_t>(kMinSamples, static_cast<uint64_t>(wanted)));
  const double expected = static_cast<double>(t.k) * static_cast<double>(p.samples) / static_cast<double>(n);
  const double rank = std::ceil(expected * (1.0 + tolerance) + 3.0 * std::sqrt(expected) + 1.0);
  p.rank = std::clamp<uint64_t>(static_cast<uint64_t>(rank), 1, p.samples);
  return p;
}

Selection SelectSampled(const float* x, size_t n, const SelectTargets& t, const SamplePlan& plan, uint64_t seed,
                        SampleScratch* scratch) {
  auto& sample = scratch->sample_keys;
  sample.resize(plan.samples);
  for (uint64_t j = 0; j < plan.samples; ++j) {
    sample[j] = MagnitudeKey(x[StratifiedPosition(seed, j, plan.samples, n)]);
  }
  std::sort(sample.begin(), sample.end(), std::greater<uint32_t>());
  uint64_t rank = plan.rank;
  uint32_t lo = sample[rank - 1];
  uint32_t hi = kKeyEnd;
  auto& keys = scratch->cand_keys;
  auto& indices = scratch->cand_indices;
  keys.clear();
  indices.clear();
  for (uint32_t pass = 0; pass <= kMaxExtraPasses; ++pass) {
    // Pass 0 is the fused EF pass on the GPU; later passes collect only the newly opened band.
    for (size_t i = 0; i < n; ++i) {
      const uint32_t key = MagnitudeKey(x[i]);
      if (key >= lo && key < hi) {
        keys.push_back(key);
        indices.push_back(static_cast<uint32_t>(i));
      }
    }
    if (keys.size() >= t.k_lo || lo == 0 || pass == kMaxExtraPasses) break;
    hi = lo;
    const bool last = pass + 1 == kMaxExtraPasses || rank >= plan.samples;
    rank = NextSampleRank(rank, keys.size(), t.k_hi, plan.samples);
    lo = last ? 0 : sample[rank - 1];
  }
  return RadixSelect(keys.data(), indices.data(), keys.size(), lo, t);
}

}  // namespace osprey::codec
