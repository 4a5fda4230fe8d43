// Density schedules of sparse codecs: how the fraction of elements sent changes with the step.
//
// Thread-safety: immutable after construction; DensityAt may be called from any thread.
#pragma once

#include <cstdint>

#include "common/codec/codec_config.h"

namespace osprey::codec {

class DensitySchedule {
 public:
  // `final_density` is CodecConfig::density; `config` must have passed ValidateCodecConfig.
  DensitySchedule(const DensityScheduleConfig& config, double final_density);

  // Density to use at `step` (0-based count of completed encodes of the tensor):
  //   none:   final
  //   warmup: start * (final/start)^(step/steps) while step < steps, then final
  //   anneal: final + (start - final) * (1 - step/steps)^2 while step < steps, then final
  double DensityAt(uint64_t step) const;

 private:
  enum class Kind { kNone, kWarmup, kAnneal };
  Kind kind_ = Kind::kNone;
  double start_ = 1.0;
  double final_ = 1.0;
  uint64_t steps_ = 0;
};

}  // namespace osprey::codec
