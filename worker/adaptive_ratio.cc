#include "worker/adaptive_ratio.h"

#include <algorithm>

namespace osprey::worker {

AdaptiveRatio::AdaptiveRatio(const codec::CodecConfig& config)
    : config_(config.adaptive_ratio),
      base_(config.density),
      can_cheapen_(config.type == "topk" && config.topk_method == "exact" && config.select == "magnitude"),
      density_(config.density),
      min_reached_(config.density),
      max_reached_(config.density) {}

bool AdaptiveRatio::Move(double density, int64_t step) {
  density = std::clamp(density, config_.min_density, config_.max_density);
  if (density == density_) return false;
  density_ = density;
  min_reached_ = std::min(min_reached_, density_);
  max_reached_ = std::max(max_reached_, density_);
  ++changes_;
  last_move_ = step;
  return true;
}

bool AdaptiveRatio::Update(const StepSample& s) {
  if (s.median_seconds <= 0 || s.own_seconds <= 0) return false;
  if (last_move_ >= 0 && s.step - last_move_ < static_cast<int64_t>(config_.interval_steps)) return false;
  const double ratio = s.own_seconds / s.median_seconds;
  if (ratio > 1.0 + config_.margin) {
    bool moved;
    if (s.push_seconds >= s.encode_seconds) {
      moved = Move(density_ / config_.factor, s.step);
    } else if (can_cheapen_ && !cheap_select_) {
      cheap_select_ = true;
      ++changes_;
      last_move_ = s.step;
      moved = true;
    } else {
      moved = Move(density_ * config_.factor, s.step);
    }
    // Still slow with nothing left to move: with async_barrier, stop holding the others.
    if (!moved && config_.async_barrier && !barrier_exempt_) {
      barrier_exempt_ = true;
      ++barrier_exits_;
      last_move_ = s.step;
    }
    return moved;
  }
  if (barrier_exempt_) {
    // Not slow any more: back behind the barrier first; the density relaxes from the next move.
    barrier_exempt_ = false;
    last_move_ = s.step;
    return false;
  }
  if (ratio < 1.0 - config_.margin && density_ != base_) {
    // Clearly faster than the median: one step back toward the configured density, never past it.
    const double toward = density_ < base_ ? std::min(base_, density_ * config_.factor)
                                           : std::max(base_, density_ / config_.factor);
    return Move(toward, s.step);
  }
  return false;
}

}  // namespace osprey::worker
