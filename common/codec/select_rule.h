// The decision rules of threshold top-k selection, shared verbatim by the CPU selection
// (radix_select.cc) and the CUDA kernels (worker/cuda), so both pick the same elements.
//
// Selection works on 31-bit magnitude keys (codec_math.h) resolved digit by digit, most
// significant first: 12 bits (a log-scale histogram: 8 exponent + 4 mantissa bits), 12 bits,
// then 7 bits. After each digit's histogram the boundary bin (the one holding the k-th largest
// key) is found, and selection stops as soon as taking or dropping that whole bin puts the count
// in [k_lo, k_hi]; otherwise it descends into the bin. When the key is fully resolved and ties at
// it would overshoot, ties go to the lowest indices (four 8-bit digits of the index).
// With k_lo == k_hi == k this is exact top-k.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "common/codec/codec_math.h"

namespace osprey::codec {

inline constexpr int kNumKeyLevels = 3;
inline constexpr int kMaxDigitBins = 4096;
inline constexpr int kNumTieLevels = 4;
inline constexpr int kTieBins = 256;

OSPREY_HD int KeyDigitBits(int level) { return level < 2 ? 12 : 7; }
// Right shift that brings digit `level` to the low bits: 19, 7, 0.
OSPREY_HD int KeyDigitShift(int level) { return level == 0 ? 19 : (level == 1 ? 7 : 0); }
OSPREY_HD int TieDigitShift(int level) { return 24 - 8 * level; }

// True when `key` lies in the range of keys whose digits above `level` equal `prefix`.
OSPREY_HD bool KeyMatchesPrefix(uint32_t key, uint32_t prefix, int level) {
  return (key >> (KeyDigitShift(level) + KeyDigitBits(level))) == prefix;
}

OSPREY_HD bool IndexMatchesPrefix(uint32_t index, uint32_t prefix, int level) {
  return level == 0 || (index >> (TieDigitShift(level) + 8)) == prefix;
}

// Count targets: k to aim for and the accepted range [k_lo, k_hi] (all equal when exact).
struct SelectTargets {
  uint64_t k = 0;
  uint64_t k_lo = 0;
  uint64_t k_hi = 0;
};

// Progress of a selection over the levels; mirrored by the CUDA device state.
struct KeyLevelResult {
  enum Kind : uint32_t { kDescend = 0, kDone = 1, kTies = 2 };
  uint32_t kind = kDescend;
  uint32_t key = 0;          // kDone: select keys >= key. kTies: the fully resolved key.
  uint64_t count = 0;        // kDone: selected count. kTies: count strictly above key.
  uint32_t next_prefix = 0;  // kDescend: prefix for the next level
};

// Decides one key level. `count_above` elements are already above the prefix range, `above_b` of
// this level's histogram lie in bins above the boundary bin `b`, which holds `h_b`.
// Precondition: count_above + above_b < k <= count_above + above_b + h_b.
OSPREY_HD KeyLevelResult DecideKeyLevel(int level, uint32_t prefix, uint32_t b, uint64_t count_above,
                                        uint64_t above_b, uint64_t h_b, const SelectTargets& t) {
  KeyLevelResult r;
  const int shift = KeyDigitShift(level);
  const uint32_t digits = (prefix << KeyDigitBits(level)) | b;
  const uint64_t a = count_above + above_b;
  if (a + h_b <= t.k_hi) {
    r.kind = KeyLevelResult::kDone;
    r.key = digits << shift;
    r.count = a + h_b;
  } else if (a >= t.k_lo) {
    r.kind = KeyLevelResult::kDone;
    r.key = (digits + 1u) << shift;  // the lowest key above bin b
    r.count = a;
  } else if (level == kNumKeyLevels - 1) {
    r.kind = KeyLevelResult::kTies;
    r.key = digits;
    r.count = a;
  } else {
    r.next_prefix = digits;
    r.count = a;
  }
  return r;
}

// Decides one tie level (ascending index digits). `below_b` ties lie in bins below `b`, which
// holds `h_b`; `need` more ties are wanted. Returns true and sets *tie_index when settled;
// otherwise sets *next_prefix and reduces *need.
OSPREY_HD bool DecideTieLevel(int level, uint32_t prefix, uint32_t b, uint64_t below_b, uint64_t h_b, uint64_t* need,
                              uint32_t* next_prefix, uint32_t* tie_index) {
  const int shift = TieDigitShift(level);
  const uint32_t digits = (prefix << 8) | b;
  if (below_b + h_b == *need) {
    *tie_index = (digits << shift) | ((1u << shift) - 1u);
    return true;
  }
  *next_prefix = digits;
  *need -= below_b;
  return false;
}

// Sampled threshold: after a pass that found `count` elements with key >= sample_key[rank - 1]
// (sample keys sorted descending), the rank to try next. Grows the rank in proportion to the
// shortfall, at least by one, and never past `samples`.
OSPREY_HD uint64_t NextSampleRank(uint64_t rank, uint64_t count, uint64_t k_hi, uint64_t samples) {
  uint64_t want = count == 0 ? 2 * rank : (rank * k_hi + count - 1) / count + 1;
  if (want < rank + 1) want = rank + 1;
  return want < samples ? want : samples;
}

}  // namespace osprey::codec
