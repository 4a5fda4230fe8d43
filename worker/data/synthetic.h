// SyntheticGenerator: Criteo-shaped click data drawn from a planted (hidden) model, so training can
// be checked against a known optimum.
//
// Each sample has `num_dense` count-like features and one id per sparse feature. Ids of feature f
// follow Zipf(zipf_alpha) over [0, cardinalities[f]) (rejection-inversion, O(1) per id, no
// tables), with the ranks scrambled by a keyed bijection so that the hot ids are not 0, 1, 2...
// The label is Bernoulli(sigmoid(logit)) with
//
//   logit = bias + sum_f w_f(id_f) + sum_j v_j * std(x_j) + c * sum_{f<g} <u_f(id_f), u_g(id_g)>
//
// where w_f(id) ~ N(0, sigma_f^2) and u_f(id) ~ N(0, I_rank) are derived by hashing (seed, f, id)
// (stored nowhere, so cardinalities of 10^7 cost nothing; the normals are quantised to 4096
// levels), v is a hidden dense weight vector and std(x_j) the standardised dense feature. The true
// P(y = 1) is returned in Batch::oracle_prob, so an evaluation can report the oracle's AUC / log
// loss beside the model's.
//
// Dense features mimic Criteo's integer counts after the reader's preprocessing: a lognormal count
// c (per-feature location/scale), emitted as log(1 + floor(c)), or 0 with probability
// dense_missing_prob.
//
// Determinism: sample i of a stream is a pure function of (config, stream_id, i), independent of
// how the stream is cut into batches and (up to last-bit differences between libm builds) of the
// platform; the ISA-specific clones of the hot loop (multiversion.h) all give the same output.
// Different stream ids give statistically independent samples of the same distribution: worker
// rank r uses stream r, held-out evaluation uses kEvalStreamId.
//
// Speed: about 1.2 million samples per second per core with the default config or the Kaggle
// cardinalities (Xeon with AVX-512, batch 256 or 4096).
//
// Thread-safety: a generator is not thread-safe; use one per thread (~230 KB, plus ~40 bytes of
// scratch per sample of the largest batch).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/data/batch.h"
#include "worker/data/zipf.h"
#include "worker/data/random.h"

namespace osprey::data {

// The default sparse cardinalities: the 26 Criteo Kaggle cardinalities capped at 20000, so that a
// small local job sees most ids often enough to learn them.
std::vector<uint64_t> DefaultSyntheticCardinalities();

struct SyntheticConfig {
  // Seeds the hidden model and, together with the stream id, every sample.
  uint64_t seed = 1;
  // Number of dense (count) features; >= 0.
  int num_dense = 13;
  // One entry per sparse feature, each in [1, 2^48]; at most 65536 features.
  std::vector<uint64_t> cardinalities = DefaultSyntheticCardinalities();
  // Zipf exponent of every sparse feature's id distribution; > 0 (1.05 is roughly Criteo's tail).
  double zipf_alpha = 1.05;
  // Constant term of the hidden logit; -1.3 gives a click rate near Criteo's ~25%.
  double bias = -1.3;
  // Standard deviation of each term of the hidden logit, as if the ids of a sample were fresh
  // independent draws (the Zipf skew makes the realised spread of a term somewhat different).
  // The defaults give an oracle AUC of about 0.81, and keep most of the signal in what a small
  // job can learn: dense features and the ids that recur within ~10^5 samples.
  double sparse_std = 1.0;       // sum_f w_f(id_f); split over features by a hidden importance
  double dense_std = 1.0;        // v . std(x)
  double interaction_std = 0.5;  // c * sum_{f<g} <u_f, u_g>
  // Rank of the interaction vectors u_f(id); 0..4 (0 disables interactions).
  int interaction_rank = 4;
  // Probability that a dense feature is missing (emitted as 0, as the Criteo reader does); [0, 1).
  double dense_missing_prob = 0.1;
  // Probability that a label is flipped after sampling (extra irreducible noise); [0, 0.5).
  // oracle_prob accounts for it.
  double label_flip_prob = 0.0;
};

// Returns OK or InvalidArgument naming the first bad field, e.g. "SyntheticConfig.zipf_alpha must
// be > 0, got 0".
Status ValidateSyntheticConfig(const SyntheticConfig& config);

class SyntheticGenerator {
 public:
  // The stream reserved for held-out evaluation data (worker streams are their ranks).
  static constexpr uint64_t kEvalStreamId = uint64_t{1} << 32;

  // Validates `config` (see ValidateSyntheticConfig) and builds the generator for `stream_id`.
  static StatusOr<std::unique_ptr<SyntheticGenerator>> Make(const SyntheticConfig& config, uint64_t stream_id);

  // The 26 sparse cardinalities of the Criteo Kaggle (Display Advertising Challenge) data set.
  static std::vector<uint64_t> CriteoKaggleCardinalities();

  // Fills *out with the next max(batch_size, 0) samples of the stream (dense, ids, labels and
  // oracle_prob), reusing its storage.
  void NextBatch(int batch_size, Batch* out);

  // Positions the stream so that the next sample is sample `index` (e.g. to resume a job).
  void SeekToSample(uint64_t index) { next_sample_ = index; }
  uint64_t next_sample() const { return next_sample_; }

  const SyntheticConfig& config() const { return config_; }
  int num_dense() const { return config_.num_dense; }
  int num_sparse() const { return static_cast<int>(config_.cardinalities.size()); }

 private:
  static constexpr int kNormalBits = 12;
  static constexpr int kNormalLevels = 1 << kNormalBits;

  SyntheticGenerator(const SyntheticConfig& config, uint64_t stream_id);
  void BuildNormalTable();
  void BuildSparseTruth();
  void BuildDenseTruth();
  // The passes of NextBatch over the n samples in out (feature-major, so that each inner loop runs
  // over independent samples with the feature's constants in registers).
  void SparsePass(int n, Batch* out);
  void DensePass(int n, Batch* out);
  void LabelPass(int n, Batch* out);
  // The accepted Zipf rank (1-based, as a double) of sample b / feature f whose first candidate
  // failed the squeeze: the exact test, then fresh uniforms until one is accepted.
  double ResolveRejected(const ZipfSampler& zipf, int b, int f) const;
  // Hash of the random choice `slot` of sample b of the current batch, and the per-slot term of
  // that hash.
  static uint64_t SlotTerm(uint64_t slot) { return (slot + 1) * kGoldenGamma; }
  uint64_t SlotHash(int b, uint64_t slot) const { return Mix64(sample_key_[b] + SlotTerm(slot)); }

  SyntheticConfig config_;
  uint64_t stream_key_;
  uint64_t next_sample_ = 0;
  // Standard normal quantiles at (i + 0.5) / 4096, rescaled to mean 0 / variance 1: 12 hash bits
  // become one normal draw through a lookup that stays in L1.
  std::vector<float> normal_;
  // Per sparse feature.
  std::vector<ZipfSampler> zipf_;
  std::vector<IndexPermutation> permutation_;
  std::vector<uint64_t> truth_key_;
  std::vector<float> sparse_sigma_;
  float interaction_coef_ = 0;
  // Per dense feature: emitted value for each of the kNormalLevels normal levels
  // ([num_dense x kNormalLevels]), and the hidden linear term on the standardised value.
  std::vector<float> dense_value_;
  std::vector<float> dense_mean_;
  std::vector<float> dense_weight_;  // v_j / std_j
  uint32_t missing_threshold_ = 0;   // dense feature missing when 20 hash bits < this

  // Per-batch scratch, one entry per sample (interaction sums: [rank x n]).
  std::vector<uint64_t> sample_key_;
  std::vector<double> candidate_;
  std::vector<float> logit_;
  std::vector<float> u_sum_;
  std::vector<float> u_sq_;
};

}  // namespace osprey::data
