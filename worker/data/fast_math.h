// Branch-free double-precision exp and log for the generators' hot loops.
//
// Unlike calls into libm, these inline into a loop and let the compiler vectorise it (SSE2 on the
// x86-64 baseline: only 64-bit integer add/sub/logical shifts and double arithmetic are used), and
// they give bit-identical results on every platform (plain IEEE operations; the targets build
// with -ffp-contract=off). The polynomials are fdlibm's (e_exp.c, e_log.c): within ~1 ulp.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

namespace osprey::data {

inline uint64_t DoubleBits(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

inline double BitsDouble(uint64_t bits) {
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// The 52 low bits of `bits`, as a double uniform in [0, 1) (built in the mantissa; no
// integer-to-double conversion, which SSE2 cannot vectorise).
inline double UnitDoubleFromMantissa(uint64_t bits) {
  return BitsDouble((bits & 0x000FFFFFFFFFFFFFULL) | 0x3FF0000000000000ULL) - 1.0;
}

// Natural logarithm. Domain: x in [2^-1022, 2^1023] (normal, positive, finite); anything else is
// the caller's bug (results are then meaningless, not NaN).
inline double FastLog(double x) {
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kLg1 = 6.666666666666735130e-01, kLg2 = 3.999999999940941908e-01;
  constexpr double kLg3 = 2.857142874366239149e-01, kLg4 = 2.222219843214978396e-01;
  constexpr double kLg5 = 1.818357216161805012e-01, kLg6 = 1.531383769920937332e-01;
  constexpr double kLg7 = 1.479819860511658591e-01;
  // x = 2^k * m with m in [sqrt(2)/2, sqrt(2)): adding (1.0 - sqrt(2)/2) in the bit domain makes
  // the biased exponent field equal k + 1023.
  const uint64_t bits = DoubleBits(x);
  const uint64_t biased_k = (bits + (0x3FF0000000000000ULL - 0x3FE6A09E667F3BCDULL)) >> 52;
  const double m = BitsDouble(bits - (biased_k << 52) + (uint64_t{1023} << 52));
  const double k = BitsDouble(biased_k | 0x4330000000000000ULL) - 4503599627370496.0 - 1023.0;

  const double f = m - 1.0;
  const double hfsq = 0.5 * f * f;
  const double s = f / (2.0 + f);
  const double z = s * s;
  const double w = z * z;
  const double t1 = w * (kLg2 + w * (kLg4 + w * kLg6));
  const double t2 = z * (kLg1 + w * (kLg3 + w * (kLg5 + w * kLg7)));
  const double r = t2 + t1;
  return k * kLn2Hi - ((hfsq - (s * (hfsq + r) + k * kLn2Lo)) - f);
}

// e^x. Inputs are clamped to [-708, 709], so the result is always a finite normal double.
inline double FastExp(double x) {
  constexpr double kInvLn2 = 1.44269504088896338700e+00;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kP1 = 1.66666666666666019037e-01, kP2 = -2.77777777770155933842e-03;
  constexpr double kP3 = 6.61375632143793436117e-05, kP4 = -1.65339022054652515390e-06;
  constexpr double kP5 = 4.13813679705723846039e-08;
  constexpr double kRoundMagic = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  x = x < -708.0 ? -708.0 : x;
  x = x > 709.0 ? 709.0 : x;
  // x = k ln2 + r, |r| <= ln2 / 2; k is read from the low mantissa bits of the rounded sum.
  const double shifted = x * kInvLn2 + kRoundMagic;
  const double k = shifted - kRoundMagic;
  const uint64_t k_bits = DoubleBits(shifted) - DoubleBits(kRoundMagic);  // k as two's complement
  const double hi = x - k * kLn2Hi;
  const double lo = k * kLn2Lo;
  const double r = hi - lo;
  const double t = r * r;
  const double c = r - t * (kP1 + t * (kP2 + t * (kP3 + t * (kP4 + t * kP5))));
  const double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
  // k is in [-1021, 1023] after the clamp, so 2^k is a normal double built from its exponent.
  return y * BitsDouble((k_bits + 1023) << 52);
}

}  // namespace osprey::data
