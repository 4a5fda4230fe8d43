// Deterministic hashing and random numbers for the data generators and model initialisation.
//
// Everything here is a pure function of its inputs or a small value type, so results are the same
// on every machine and in every process: the synthetic data set and the initial model weights are
// reproducible from a seed alone. Nothing here is meant for cryptography.
//
// Thread-safety: free functions are pure; an `Rng` object must not be shared between threads.
#pragma once

#include <cmath>
#include <cstdint>

namespace osprey::data {

// 2^64 / golden ratio, odd: the usual additive constant for Weyl sequences and Fibonacci hashing.
inline constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;

// SplitMix64 finaliser (Steele, Lea, Flood 2014): a bijection of u64 with full avalanche.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x;
}

// Hash of an ordered pair; HashPair(a, b) and HashPair(b, a) differ.
inline uint64_t HashPair(uint64_t a, uint64_t b) { return Mix64(a ^ Mix64(b + kGoldenGamma)); }

// The top 53 bits of `bits` as a double uniform in [0, 1).
inline double UnitDouble(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// Inverse of the standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9).
// Precondition: 0 < p < 1.
double InverseNormalCdf(double p);

// A keyed bijection of [0, n) onto itself, cheap enough to apply to every generated id.
//
// With w the largest power of two <= n (so w > n / 2), the windows [0, w) and [n - w, n) overlap
// and cover [0, n). The map scrambles the low window, then the high window, then the low window
// again, each time with a keyed bijection of log2(w)-bit integers (add a key, multiply by an odd
// constant, xor-shift). Every step is a bijection of [0, n), so the composition is one; it
// has no data-dependent branches (unlike cycle walking), which keeps the generator's hot loop free
// of mispredictions. Good enough to scatter hot Zipf ranks over the id space; not a cryptographic
// permutation.
class IndexPermutation {
 public:
  // Precondition: n >= 1.
  IndexPermutation(uint64_t n, uint64_t key) : n_(n) {
    int bits = 0;
    while (bits < 63 && (uint64_t{2} << bits) <= n) ++bits;
    window_ = uint64_t{1} << bits;
    mask_ = window_ - 1;
    shift_ = bits < 2 ? 1 : (bits + 1) / 2;
    for (int i = 0; i < kRounds; ++i) {
      key_[i] = Mix64(key + 2 * i);
      mul_[i] = Mix64(key + 2 * i + 1) | 1;
    }
  }

  // Precondition: x < n.
  uint64_t operator()(uint64_t x) const {
    // Each step computes the scrambled value unconditionally and selects with a mask: compilers
    // turn `cond ? f(x) : x` into a branch, which mispredicts on random ids.
    const uint64_t high = n_ - window_;  // start of the high window
    x = Select(x < window_, Round(0, x & mask_), x);
    x = Select(x >= high, high + Round(1, (x - high) & mask_), x);
    return Select(x < window_, Round(2, x & mask_), x);
  }

 private:
  static constexpr int kRounds = 3;

  static uint64_t Select(bool condition, uint64_t if_true, uint64_t if_false) {
    const uint64_t mask = 0 - static_cast<uint64_t>(condition);
    return (if_true & mask) | (if_false & ~mask);
  }

  // A bijection of [0, window_).
  uint64_t Round(int i, uint64_t x) const {
    x = ((x + key_[i]) * mul_[i]) & mask_;
    return x ^ (x >> shift_);
  }

  uint64_t n_;
  uint64_t window_;
  uint64_t mask_;
  int shift_;
  uint64_t key_[kRounds];
  uint64_t mul_[kRounds];
};

// A small seeded generator (SplitMix64 sequence) for initialisation code that wants a stream of
// numbers rather than hashes. Same seed -> same sequence on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(Mix64(seed ^ 0x5DEECE66DULL)) {}

  uint64_t NextU64() { return Mix64(state_ += kGoldenGamma); }
  // Uniform in [0, 1).
  double NextUniform() { return UnitDouble(NextU64()); }
  // Standard normal (Box-Muller; one of the pair is discarded to keep the state trivial).
  double NextNormal() {
    const double u1 = 1.0 - NextUniform();  // (0, 1]: log is finite
    const double u2 = NextUniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace osprey::data
