// Configuration of gradient compression, as read from the `compression:` section of a worker's
// YAML (the config loader fills this struct; nothing here reads files or the environment).
//
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace osprey::codec {

// How the density (fraction of elements sent) of topk/randomk changes over training steps.
struct DensityScheduleConfig {
  // "none":   density is CodecConfig::density at every step.
  // "warmup": DGC warm-up. Density falls exponentially from start_density to CodecConfig::density
  //           over the first `steps` steps: d(t) = start * (end/start)^(t/steps); with the defaults
  //           sparsity ramps 75% -> 99% (DGC uses 75% -> 99.9% over 4 epochs).
  // "anneal": d(t) = end + (start - end) * (1 - t/steps)^2, then end.
  std::string type = "none";
  double start_density = 0.25;  // density at step 0; in [CodecConfig::density, 1]
  uint64_t steps = 0;           // length of the ramp; > 0 unless type is "none"
};

// Adaptive per-node density (issue 18, worker/adaptive_ratio.h): a worker whose own step time is
// above the job's median (learned from the coordinator) moves its density within
// [min_density, max_density]: lower when its pushes dominate its step (network-bound), a cheaper
// selection or a higher density when encoding does (selection-bound); back toward `density` when
// it is clearly faster than the median. Needs type topk or randomk; CPU workers only.
struct AdaptiveRatioConfig {
  bool enabled = false;            // set when the `adaptive_ratio` section is present
  double min_density = 0;          // in (0, density]
  double max_density = 0;          // in [density, 1]
  std::string target = "median_step_time";  // the only target
  // Fraction above (below) the median that counts as slower (faster); in (0, 1).
  double margin = 0.15;
  // Multiplicative step of one move (density *= factor or /= factor); in (1, 10].
  double factor = 1.5;
  // Fewest steps between two moves, so the step time settles on the new density; >= 1.
  uint64_t interval_steps = 20;
  // A worker still slow at its bound leaves the step barrier: bsp windows and ssp bounds stop
  // waiting for it and it skips ahead to the others' clock (worker/adaptive_ratio.h). Needs a
  // bsp or ssp table (config::ValidateTableCodecs).
  bool async_barrier = false;
};

struct CodecConfig {
  // "none" | "fp16" | "bf16" | "topk" | "randomk" | "onebit".
  std::string type = "none";

  // topk/randomk: fraction of elements sent, in (0, 1]; k = max(1, round(density * n)).
  double density = 0.01;
  // topk: "exact" (the k largest |x|, ties to lower index), "sample" (DGC threshold from a
  // random sample, adapted until the count is within count_tolerance of k), "histogram"
  // (log-scale magnitude histogram, refined inside the boundary bin until within tolerance).
  std::string topk_method = "exact";
  // topk sample: fraction of elements sampled, in (0, 1]; at least kMinSamples are drawn.
  double sample_rate = 0.005;
  // topk sample/histogram: accepted relative error of the selected count, in [0, 1).
  // 0 makes both methods exact.
  double count_tolerance = 0.05;
  // topk: what ranks the elements. "magnitude": |p| (p: the gradient plus the residual).
  // "importance": p^2 / sqrt(F), F a per-element Fisher estimate (the exponential average, decay
  // kFisherDecay, of p^2): the loss decrease an Adagrad-like step would get from sending p, so
  // an element that is large only against its usual size outranks one that is always large.
  // With a uniform F (and at the first step) it is the magnitude ranking. Needs topk_method exact.
  std::string select = "magnitude";
  // topk/randomk: wire type of the selected values: "fp32" | "fp16" | "bf16". Selection and the
  // error-feedback residual stay in fp32 whatever this is: only the selected values are cast
  // (the safe way to send to fp16/bf16 models; tests/codec/mixed_precision_test.cc).
  std::string value_type = "fp32";
  // onebit: elements sharing one scale; a positive multiple of 32.
  uint32_t onebit_chunk = 1024;
  // Seed of random-k and of the sampled threshold; mixed with the tensor seed and the step.
  uint64_t seed = 0x05B2E7;

  // Error feedback: keep what was not sent in a per-tensor residual and add it next step.
  // Ignored for "none", which loses nothing.
  bool error_feedback = false;
  // DGC momentum correction with momentum-factor masking (Lin et al. 2018); 0 is off, else in
  // (0, 1). Needs error_feedback and a sparse codec (topk/randomk).
  float dgc_momentum = 0.0f;
  // Clip the tensor's L2 norm to this value before compression; 0 is off.
  float clip_norm = 0.0f;
  DensityScheduleConfig schedule;

  // Push messages smaller than this many bytes are sent uncompressed ("none").
  size_t min_compress_bytes = 16384;
  // Encode units of a push message (one server's share of the dense table), each with its own
  // state and its own k = density x unit size:
  //   "tensor": the whole message is one unit (one k for the message).
  //   "bucket": the message is cut into units of bucket_bytes regardless of tensor boundaries.
  //   "layer":  one unit per model tensor (the model's TensorLayout, tensor_layout.h), so a small
  //             layer is never starved by a large one; k_l = max(layer_min_k, density x size_l).
  std::string granularity = "tensor";
  size_t bucket_bytes = size_t{4} << 20;  // a positive multiple of 4
  // granularity "layer", topk/randomk: the fewest elements a layer sends per step (capped at
  // the layer's size); >= 1.
  uint64_t layer_min_k = 1;
  AdaptiveRatioConfig adaptive_ratio;
};

// Decay of the Fisher estimate of select "importance" (about 100 steps of memory).
inline constexpr double kFisherDecay = 0.99;

// Fewest draws of the sampled threshold estimate, whatever sample_rate says: below this the
// sample quantile is too noisy to land within a few percent of k.
inline constexpr size_t kMinSamples = 16384;
// Extra selection passes the sampled method may make when its first threshold selected fewer
// than k * (1 - count_tolerance) elements; the last one takes every remaining element.
inline constexpr uint32_t kMaxExtraPasses = 2;

// Returns OK or InvalidArgument naming the first bad field and its value, e.g.
// "compression.density = 1.5: must be in (0, 1]".
Status ValidateCodecConfig(const CodecConfig& config);

}  // namespace osprey::codec
