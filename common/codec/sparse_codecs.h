// Sparse codecs: top-k by magnitude (exact, sampled threshold, histogram threshold) and random-k.
// Both emit the sparse payload of encoded.h with indices in ascending order.
// Thread-safety: see codec.h.
#pragma once

#include "common/codec/codec.h"
#include "common/codec/radix_select.h"
#include "common/codec/schedule.h"

namespace osprey::codec {

enum class TopKMethod { kExact, kSample, kHistogram };

// "exact" | "sample" | "histogram" (validated by ValidateCodecConfig); anything else is kExact.
TopKMethod TopKMethodFromName(const std::string& name);

struct SparseCodecOptions {
  DensitySchedule schedule{DensityScheduleConfig{}, 0.01};
  ValueType value_type = ValueType::kFp32;
  uint64_t seed = 0;
  // topk only.
  TopKMethod method = TopKMethod::kExact;
  double sample_rate = 0.005;
  double count_tolerance = 0.05;
  bool importance = false;  // select "importance" (exact method only)
};

// Sends the elements a Selection picks (radix_select.h) with their values.
//   exact:     SelectExact, exactly k
//   histogram: RadixSelect over all keys, count in [k_lo, k_hi]
//   sample:    SelectSampled, count in [k_lo, k_hi] unless the extra passes ran out
class TopKCodec final : public Codec {
 public:
  explicit TopKCodec(SparseCodecOptions options) : options_(std::move(options)) {}

  Status Encode(const float* g, size_t n, CodecState* state, Encoded* out) const override;
  Status DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const override;

  // The selection Encode would make for x at `step` (exposed as the reference of the CUDA top-k).
  Selection Select(const float* x, size_t n, uint64_t step, uint64_t tensor_seed, CodecState* state) const;

 private:
  SparseCodecOptions options_;
};

// Random-k baseline: one uniformly random index in each of k equal strata (StratifiedPosition),
// seeded by (seed, tensor_seed, step). Values are sent unscaled (meant for use with error
// feedback, which makes it unbiased over steps).
class RandomKCodec final : public Codec {
 public:
  explicit RandomKCodec(SparseCodecOptions options) : options_(std::move(options)) {}

  Status Encode(const float* g, size_t n, CodecState* state, Encoded* out) const override;
  Status DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const override;

 private:
  SparseCodecOptions options_;
};

// The density that makes MakeTargets select at least min(min_k, n) elements:
// max(density, min_k / n) (density itself when min_k <= 1).
double FlooredDensity(double density, size_t n, uint64_t min_k);

// Writes the sparse frame of the elements `sel` selects from x[0, n) (ascending indices). With
// `rank` (not null) the selection is judged on rank[i]'s key and x[i] is the value sent.
void WriteSelected(const float* x, size_t n, const Selection& sel, CodecId id, ValueType type, Encoded* out,
                   const float* rank = nullptr);

// select "importance": updates the Fisher estimate F = d*F + (1-d)*x^2 (d = kFisherDecay) and
// writes the ranking keys scores[i] = x[i] / sqrt(sqrt(F[i]) + 1e-30), whose magnitude order is
// that of x^2 / sqrt(F). fisher and scores hold n floats.
void ImportanceScores(const float* x, size_t n, float* fisher, float* scores);

}  // namespace osprey::codec
