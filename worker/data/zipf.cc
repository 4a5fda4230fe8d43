#include "worker/data/zipf.h"

namespace osprey::data {
namespace {

constexpr double kMinDistanceFromOne = 1e-6;

double AwayFromOne(double alpha) {
  if (alpha >= 1.0 && alpha < 1.0 + kMinDistanceFromOne) return 1.0 + kMinDistanceFromOne;
  if (alpha < 1.0 && alpha > 1.0 - kMinDistanceFromOne) return 1.0 - kMinDistanceFromOne;
  return alpha;
}

}  // namespace

ZipfSampler::ZipfSampler(uint64_t n, double alpha)
    : n_(n),
      n_double_(static_cast<double>(n)),
      alpha_(AwayFromOne(alpha)),
      one_minus_alpha_(1.0 - alpha_),
      inv_one_minus_alpha_(1.0 / (1.0 - alpha_)) {
  h_integral_x1_ = HIntegral(1.5) - 1.0;
  h_integral_n_ = HIntegral(n_double_ + 0.5);
  s_ = 2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0));
}

}  // namespace osprey::data
