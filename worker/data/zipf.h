// Zipf sampling in O(1) per sample without tables: rejection-inversion (Hörmann & Derflinger,
// "Rejection-inversion to generate variates from monotone discrete distributions", 1996).
//
// P(rank = k) is proportional to (k + 1)^-alpha for k in [0, n). Memory and setup are O(1), so
// n = 10^7 (or 2^48) costs the same as n = 10; the expected number of uniforms per sample is
// slightly above one. The formulation follows Apache Commons RNG's
// RejectionInversionZipfSampler; the hot path (Candidate) is branch-free and uses FastLog /
// FastExp so that a loop over many uniforms vectorises.
//
// Thread-safety: a ZipfSampler is immutable after construction; share it freely.
#pragma once

#include <cmath>
#include <cstdint>

#include "worker/data/fast_math.h"

namespace osprey::data {

class ZipfSampler {
 public:
  // Preconditions (validated by callers such as SyntheticGenerator::Make): n in [1, 2^52], alpha
  // > 0 and finite. An alpha within 1e-6 of 1 is sampled as exactly 1 -/+ 1e-6, which keeps the
  // inversion formula free of a special case and changes no probability by more than 4e-5
  // (relative).
  ZipfSampler(uint64_t n, double alpha);

  uint64_t n() const { return n_; }
  double alpha() const { return alpha_; }

  // The rejection-inversion candidate for a uniform r in [0, 1): its 1-based rank as an integral
  // double in [1, n], negated when the cheap squeeze test does not accept it (a few percent of
  // draws); then ExactAccept decides. Branch-free, for vectorised loops.
  // alpha() is the exponent actually sampled (see the constructor).
  double Candidate(double r) const {
    const double u = UniformToH(r);
    // Only the absolute error of the logarithm matters once it is exponentiated, so log(1 + t)
    // serves as well as log1p(t). The clamp keeps FastLog in its domain (rank 1 then).
    double w = 1.0 + u * one_minus_alpha_;
    w = w < 1e-300 ? 1e-300 : w;
    const double log_x = FastLog(w) * inv_one_minus_alpha_;
    const double x = FastExp(log_x);
    double k = FloorNonNegative(x + 0.5);
    k = k < 1.0 ? 1.0 : k;
    k = k > n_double_ ? n_double_ : k;
    return k - x <= s_ ? k : -k;
  }

  // The exact acceptance test for a candidate k (positive, as returned negated by Candidate) drawn
  // from r. Uses libm; called for a few percent of draws.
  bool ExactAccept(double r, double k) const { return UniformToH(r) >= HIntegral(k + 0.5) - H(k); }

  // One complete attempt: sets *rank (0-based) and returns true when the draw from r is accepted,
  // false when the caller must retry with a fresh uniform.
  bool TrySample(double r, uint64_t* rank) const {
    const double c = Candidate(r);
    const double k = c < 0 ? -c : c;
    *rank = static_cast<uint64_t>(static_cast<int64_t>(k)) - 1;
    return c > 0 || ExactAccept(r, k);
  }

  // Draws a rank, calling `next_uniform()` (returning doubles in [0, 1)) as often as needed.
  template <typename NextUniform>
  uint64_t Sample(NextUniform&& next_uniform) const {
    uint64_t rank;
    while (!TrySample(next_uniform(), &rank)) {
    }
    return rank;
  }

 private:
  // Maps r in [0, 1) onto (h_integral_x1_, h_integral_n_].
  double UniformToH(double r) const { return h_integral_n_ + r * (h_integral_x1_ - h_integral_n_); }
  // floor(y) for y in [0, 2^52), without a libm call or a conversion to integer.
  static double FloorNonNegative(double y) {
    constexpr double kTwo52 = 4503599627370496.0;
    const double rounded = (y + kTwo52) - kTwo52;  // round to nearest
    return rounded > y ? rounded - 1.0 : rounded;
  }
  // h(x) = x^-alpha, the unnormalised density on the 1-based rank.
  double H(double x) const { return std::exp(-alpha_ * std::log(x)); }
  // Antiderivative of h: (x^(1-alpha) - 1) / (1 - alpha), or log(x) when alpha == 1.
  double HIntegral(double x) const {
    const double log_x = std::log(x);
    return Helper2((1.0 - alpha_) * log_x) * log_x;
  }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - alpha_);
    if (t < -1.0) t = -1.0;  // guards rounding at the lower end of the range
    return std::exp(Helper1(t) * x);
  }
  // log1p(x) / x, accurate near 0.
  static double Helper1(double x) {
    if (std::fabs(x) > 1e-8) return std::log1p(x) / x;
    return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  // expm1(x) / x, accurate near 0.
  static double Helper2(double x) {
    if (std::fabs(x) > 1e-8) return std::expm1(x) / x;
    return 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
  }

  uint64_t n_;
  double n_double_;
  double alpha_;
  double h_integral_x1_;
  double h_integral_n_;
  double s_;
  double one_minus_alpha_;
  double inv_one_minus_alpha_;
};

}  // namespace osprey::data
