#include "common/codec/schedule.h"

#include <cmath>

namespace osprey::codec {

DensitySchedule::DensitySchedule(const DensityScheduleConfig& config, double final_density)
    : start_(config.start_density), final_(final_density), steps_(config.steps) {
  if (config.type == "warmup") kind_ = Kind::kWarmup;
  if (config.type == "anneal") kind_ = Kind::kAnneal;
}

double DensitySchedule::DensityAt(uint64_t step) const {
  if (kind_ == Kind::kNone || step >= steps_) return final_;
  const double progress = static_cast<double>(step) / static_cast<double>(steps_);
  if (kind_ == Kind::kWarmup) {
    // Exponential in the step, as DGC's 75% -> 93.75% -> 98.4375% ... sparsity ladder: each step
    // multiplies the density by the same factor, so no single step drops it abruptly.
    return start_ * std::pow(final_ / start_, progress);
  }
  const double rest = 1.0 - progress;
  return final_ + (start_ - final_) * rest * rest;
}

}  // namespace osprey::codec
