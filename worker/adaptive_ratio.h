// AdaptiveRatio: the per-node density controller of `codec.adaptive_ratio` (issue 18).
//
// A worker compares its own step time (what its steps take without waiting for the others: see
// StepSample) with the job's median, which the coordinator computes from the workers' heartbeats
// (ClusterState.median_step_seconds). When it is slower than the median by more than `margin`, it
// moves in the direction its step breakdown says helps:
//   network-bound (sending pushes dominates the step):   density /= factor, down to min_density
//                                                         (fewer bytes on the wire);
//   selection-bound (encoding dominates the step):       first a cheaper selection (top-k exact
//                                                         -> sampled threshold, when the config
//                                                         allows it), then density *= factor, up
//                                                         to max_density (the guide's 2% -> 5%);
// and when it is faster than the median by more than `margin` it relaxes one step back toward
// the configured density. Between the two bands it holds (hysteresis), and it moves at most once
// every `interval_steps` steps so its step time settles on the new density first. Without a
// median (fewer than two workers reporting) it holds.
//
// async_barrier: a worker that is still slower than the band after moving as far as its bounds
// allow (or could not move at all) leaves the step barrier: barrier_exempt() turns true, its
// heartbeats say so, the servers stop waiting for it and it skips ahead to the clock of the
// workers holding the barrier (Trainer::SkipToBarrier). Once its step time is back within the
// band it rejoins (barrier_exempt() false) before the density relaxes.
//
// The density is the post-schedule density: the compressor scales the schedule's density at each
// step by density() / config.density (DenseCompressor::SetAdaptive), so a warm-up keeps its
// shape and the controller only moves its end point.
//
// Pure logic: no clock, no threads; the caller feeds it samples. Not thread-safe (the training
// thread owns it).
#pragma once

#include <cstdint>

#include "common/codec/codec_config.h"

namespace osprey::worker {

// One observation of the worker's recent steps (exponential averages over the last steps).
struct StepSample {
  int64_t step = 0;           // the training step this sample follows
  double own_seconds = 0;     // step time minus the time waiting on pulls (the others' pace)
  double push_seconds = 0;    // of own_seconds: sending pushes, excluding encode
  double encode_seconds = 0;  // of own_seconds: the codec's select + EF + pack
  double median_seconds = 0;  // the job's median own step time; <= 0: not known yet
};

class AdaptiveRatio {
 public:
  // `config` must have passed codec::ValidateCodecConfig with adaptive_ratio.enabled.
  explicit AdaptiveRatio(const codec::CodecConfig& config);

  // Feeds one sample; returns true when density() or cheap_select() changed.
  bool Update(const StepSample& sample);

  double density() const { return density_; }
  // True once the controller switched a selection-bound worker to the sampled threshold.
  bool cheap_select() const { return cheap_select_; }
  double min_reached() const { return min_reached_; }
  double max_reached() const { return max_reached_; }
  uint64_t changes() const { return changes_; }
  // async_barrier: whether this worker has left the step barrier (see above), and how often it did.
  bool barrier_exempt() const { return barrier_exempt_; }
  uint64_t barrier_exits() const { return barrier_exits_; }

 private:
  bool Move(double density, int64_t step);

  const codec::AdaptiveRatioConfig config_;
  const double base_;          // the configured density
  const bool can_cheapen_;     // top-k exact with magnitude ranking: sampling gives the same kind
  double density_;
  bool cheap_select_ = false;
  double min_reached_;
  double max_reached_;
  uint64_t changes_ = 0;
  int64_t last_move_ = -1;     // step of the last move (or barrier exit / return); -1: none yet
  bool barrier_exempt_ = false;
  uint64_t barrier_exits_ = 0;
};

}  // namespace osprey::worker
