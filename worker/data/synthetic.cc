#include "worker/data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "worker/data/multiversion.h"

namespace osprey::data {
namespace {

constexpr int kMaxInteractionRank = 4;  // 4 x 12 hash bits for u, 12 for w: one 64-bit hash per id

// Domain separators for the hashes that derive the hidden model from the seed.
constexpr uint64_t kSparseDomain = 0x5350415253450001ULL;
constexpr uint64_t kDenseDomain = 0x44454E5345000002ULL;
constexpr uint64_t kStreamDomain = 0x53545245414D0003ULL;

// candidate[b] = the Zipf candidate of sample b for the hash slot term `slot_term` (see
// SlotHash). Branch-free: vectorises, and is cloned for wider vector units.
OSPREY_MULTIVERSION void ZipfCandidates(const ZipfSampler& zipf, const uint64_t* sample_key, uint64_t slot_term,
                                        int n, double* candidate) {
  for (int b = 0; b < n; ++b) candidate[b] = zipf.Candidate(UnitDoubleFromMantissa(Mix64(sample_key[b] + slot_term)));
}

std::string Field(const char* name) { return std::string("SyntheticConfig.") + name; }

Status CheckFinite(const char* name, double value) {
  if (std::isfinite(value)) return Status::OK();
  return InvalidArgument(Field(name) + " must be finite, got " + std::to_string(value));
}

Status CheckRange(const char* name, double value, double lo, bool lo_inclusive, double hi) {
  OSPREY_RETURN_IF_ERROR(CheckFinite(name, value));
  const bool ok = (lo_inclusive ? value >= lo : value > lo) && value < hi;
  if (ok) return Status::OK();
  return InvalidArgument(Field(name) + " must be in " + (lo_inclusive ? "[" : "(") + std::to_string(lo) + ", " +
                         std::to_string(hi) + "), got " + std::to_string(value));
}

}  // namespace

std::vector<uint64_t> DefaultSyntheticCardinalities() {
  std::vector<uint64_t> cardinalities = SyntheticGenerator::CriteoKaggleCardinalities();
  for (uint64_t& c : cardinalities) c = std::min<uint64_t>(c, 20000);
  return cardinalities;
}

std::vector<uint64_t> SyntheticGenerator::CriteoKaggleCardinalities() {
  return {1460, 583,   10131227, 2202608, 305,  24, 12517, 633, 3,       93145, 5683, 8351593, 3194,
          27,   14992, 5461306,  10,      5652, 2173, 4,   7046547, 18, 15, 286181, 105,  142572};
}

Status ValidateSyntheticConfig(const SyntheticConfig& config) {
  if (config.num_dense < 0) {
    return InvalidArgument(Field("num_dense") + " must be >= 0, got " + std::to_string(config.num_dense));
  }
  if (config.cardinalities.empty()) return InvalidArgument(Field("cardinalities") + " must not be empty");
  if (config.cardinalities.size() > static_cast<size_t>(kMaxSparseFeatures)) {
    return InvalidArgument(Field("cardinalities") + " has " + std::to_string(config.cardinalities.size()) +
                           " features, at most " + std::to_string(kMaxSparseFeatures) + " fit the key space");
  }
  for (size_t f = 0; f < config.cardinalities.size(); ++f) {
    const uint64_t c = config.cardinalities[f];
    if (c == 0 || c > kFeatureIdMask + 1) {
      return InvalidArgument(Field("cardinalities") + "[" + std::to_string(f) + "] must be in [1, 2^48], got " +
                             std::to_string(c));
    }
  }
  if (!(config.zipf_alpha > 0) || !std::isfinite(config.zipf_alpha)) {
    return InvalidArgument(Field("zipf_alpha") + " must be > 0 and finite, got " + std::to_string(config.zipf_alpha));
  }
  OSPREY_RETURN_IF_ERROR(CheckFinite("bias", config.bias));
  OSPREY_RETURN_IF_ERROR(CheckRange("sparse_std", config.sparse_std, 0, true, 1e6));
  OSPREY_RETURN_IF_ERROR(CheckRange("dense_std", config.dense_std, 0, true, 1e6));
  OSPREY_RETURN_IF_ERROR(CheckRange("interaction_std", config.interaction_std, 0, true, 1e6));
  if (config.interaction_rank < 0 || config.interaction_rank > kMaxInteractionRank) {
    return InvalidArgument(Field("interaction_rank") + " must be in [0, 4], got " +
                           std::to_string(config.interaction_rank));
  }
  OSPREY_RETURN_IF_ERROR(CheckRange("dense_missing_prob", config.dense_missing_prob, 0, true, 1));
  OSPREY_RETURN_IF_ERROR(CheckRange("label_flip_prob", config.label_flip_prob, 0, true, 0.5));
  return Status::OK();
}

StatusOr<std::unique_ptr<SyntheticGenerator>> SyntheticGenerator::Make(const SyntheticConfig& config,
                                                                        uint64_t stream_id) {
  OSPREY_RETURN_IF_ERROR(ValidateSyntheticConfig(config));
  return std::unique_ptr<SyntheticGenerator>(new SyntheticGenerator(config, stream_id));
}

SyntheticGenerator::SyntheticGenerator(const SyntheticConfig& config, uint64_t stream_id)
    : config_(config), stream_key_(HashPair(HashPair(config.seed, kStreamDomain), stream_id)) {
  BuildNormalTable();
  BuildSparseTruth();
  BuildDenseTruth();
}

void SyntheticGenerator::BuildNormalTable() {
  normal_.resize(kNormalLevels);
  std::vector<double> q(kNormalLevels);
  double sum_sq = 0;
  for (int i = 0; i < kNormalLevels; ++i) {
    q[i] = InverseNormalCdf((i + 0.5) / kNormalLevels);
    sum_sq += q[i] * q[i];
  }
  // The quantiles are symmetric (mean 0); rescale so the discrete distribution has variance 1.
  const double scale = 1.0 / std::sqrt(sum_sq / kNormalLevels);
  for (int i = 0; i < kNormalLevels; ++i) normal_[i] = static_cast<float>(q[i] * scale);
}

void SyntheticGenerator::BuildSparseTruth() {
  const size_t num_sparse = config_.cardinalities.size();
  const uint64_t sparse_key = HashPair(config_.seed, kSparseDomain);
  std::vector<double> importance(num_sparse);
  double sum_sq = 0;
  for (size_t f = 0; f < num_sparse; ++f) {
    const uint64_t key = HashPair(sparse_key, f);
    const uint64_t n = config_.cardinalities[f];
    zipf_.emplace_back(n, config_.zipf_alpha);
    permutation_.emplace_back(n, HashPair(key, 1));
    truth_key_.push_back(HashPair(key, 2));
    // Hidden importance in [0.25, 1): some features matter ~4x more than others.
    importance[f] = 0.25 + 0.75 * UnitDouble(HashPair(key, 3));
    sum_sq += importance[f] * importance[f];
  }
  for (size_t f = 0; f < num_sparse; ++f) {
    sparse_sigma_.push_back(static_cast<float>(config_.sparse_std * importance[f] / std::sqrt(sum_sq)));
  }
  // Var(c * sum over P pairs of a rank-R dot of unit normals) = c^2 * P * R.
  const double pairs = 0.5 * static_cast<double>(num_sparse) * static_cast<double>(num_sparse - 1);
  const double terms = pairs * config_.interaction_rank;
  interaction_coef_ = terms > 0 ? static_cast<float>(config_.interaction_std / std::sqrt(terms)) : 0.0f;
}

void SyntheticGenerator::BuildDenseTruth() {
  const int num_dense = config_.num_dense;
  const uint64_t dense_key = HashPair(config_.seed, kDenseDomain);
  const double present = 1.0 - config_.dense_missing_prob;
  missing_threshold_ = static_cast<uint32_t>(config_.dense_missing_prob * (1 << 20));
  dense_value_.resize(static_cast<size_t>(num_dense) * kNormalLevels);
  std::vector<double> std_dev(num_dense);
  std::vector<double> direction(num_dense);
  double norm_sq = 0;
  for (int j = 0; j < num_dense; ++j) {
    const uint64_t key = HashPair(dense_key, static_cast<uint64_t>(j));
    // Log-count location in [0, 3) and scale in [0.7, 1.7): from mostly-zero to wide counts.
    const double mu = 3.0 * UnitDouble(HashPair(key, 1));
    const double sigma = 0.7 + UnitDouble(HashPair(key, 2));
    double sum = 0, sum_sq = 0;
    for (int i = 0; i < kNormalLevels; ++i) {
      const double count = std::floor(std::exp(mu + sigma * normal_[i]));
      const auto x = static_cast<float>(std::log1p(count));
      dense_value_[static_cast<size_t>(j) * kNormalLevels + i] = x;
      sum += x;
      sum_sq += static_cast<double>(x) * x;
    }
    // Exact moments of the emitted value, missing values (0) included.
    const double mean = present * sum / kNormalLevels;
    const double variance = present * sum_sq / kNormalLevels - mean * mean;
    dense_mean_.push_back(static_cast<float>(mean));
    std_dev[j] = std::sqrt(std::max(variance, 1e-12));
    direction[j] = normal_[HashPair(key, 3) & (kNormalLevels - 1)];
    norm_sq += direction[j] * direction[j];
  }
  // v has norm dense_std, so v . std(x) has standard deviation dense_std.
  const double scale = norm_sq > 0 ? config_.dense_std / std::sqrt(norm_sq) : 0.0;
  for (int j = 0; j < num_dense; ++j) dense_weight_.push_back(static_cast<float>(scale * direction[j] / std_dev[j]));
}

void SyntheticGenerator::NextBatch(int batch_size, Batch* out) {
  const int n = std::max(batch_size, 0);
  out->size = n;
  out->num_dense = config_.num_dense;
  out->num_sparse = num_sparse();
  out->dense.resize(static_cast<size_t>(n) * config_.num_dense);
  out->ids.resize(static_cast<size_t>(n) * num_sparse());
  out->labels.resize(n);
  out->oracle_prob.resize(n);
  // Every random choice of sample i is a hash of (stream, i, slot): slots 0..F-1 are the sparse
  // features, F..F+D-1 the dense ones, F+D the label. Hence sample i does not depend on the
  // batching.
  sample_key_.resize(n);
  for (int b = 0; b < n; ++b) sample_key_[b] = Mix64(stream_key_ + (next_sample_ + b) * kGoldenGamma);
  logit_.assign(n, static_cast<float>(config_.bias));
  SparsePass(n, out);
  DensePass(n, out);
  LabelPass(n, out);
  next_sample_ += n;
}

void SyntheticGenerator::SparsePass(int n, Batch* out) {
  const int num_sparse = this->num_sparse();
  const int rank = config_.interaction_rank;
  constexpr uint64_t kLevelMask = kNormalLevels - 1;
  u_sum_.assign(static_cast<size_t>(rank) * n, 0.0f);
  u_sq_.assign(n, 0.0f);
  candidate_.resize(n);
  const float* normal = normal_.data();
  for (int f = 0; f < num_sparse; ++f) {
    const ZipfSampler& zipf = zipf_[f];
    const double* candidate = candidate_.data();
    ZipfCandidates(zipf, sample_key_.data(), SlotTerm(f), n, candidate_.data());

    const IndexPermutation& permutation = permutation_[f];
    const uint64_t truth_key = truth_key_[f];
    const float sigma = sparse_sigma_[f];
    uint64_t* ids = out->ids.data() + f;
    for (int b = 0; b < n; ++b) {
      const double k = candidate[b] > 0 ? candidate[b] : ResolveRejected(zipf, b, f);
      const uint64_t id = permutation(static_cast<uint64_t>(static_cast<int64_t>(k)) - 1);
      ids[static_cast<size_t>(b) * num_sparse] = id;
      // The hidden parameters of (f, id): 12 bits for w, 12 bits per interaction coordinate.
      const uint64_t truth = Mix64(truth_key ^ id);
      logit_[b] += sigma * normal[truth & kLevelMask];
      float sq = 0;
      for (int r = 0; r < rank; ++r) {
        const float u = normal[(truth >> (kNormalBits * (r + 1))) & kLevelMask];
        u_sum_[static_cast<size_t>(r) * n + b] += u;
        sq += u * u;
      }
      u_sq_[b] += sq;
    }
  }
  // sum_{f<g} <u_f, u_g> = (|sum_f u_f|^2 - sum_f |u_f|^2) / 2.
  for (int b = 0; b < n; ++b) {
    float sum_sq = 0;
    for (int r = 0; r < rank; ++r) {
      const float s = u_sum_[static_cast<size_t>(r) * n + b];
      sum_sq += s * s;
    }
    logit_[b] += interaction_coef_ * 0.5f * (sum_sq - u_sq_[b]);
  }
}

double SyntheticGenerator::ResolveRejected(const ZipfSampler& zipf, int b, int f) const {
  uint64_t h = SlotHash(b, f);
  double r = UnitDoubleFromMantissa(h);
  double k = -zipf.Candidate(r);
  while (!zipf.ExactAccept(r, k)) {
    h = Mix64(h + kGoldenGamma);  // the next uniform of this (sample, feature)
    r = UnitDoubleFromMantissa(h);
    const double c = zipf.Candidate(r);
    k = c < 0 ? -c : c;
    if (c > 0) break;
  }
  return k;
}

void SyntheticGenerator::DensePass(int n, Batch* out) {
  const int num_sparse = this->num_sparse();
  const int num_dense = config_.num_dense;
  constexpr uint64_t kLevelMask = kNormalLevels - 1;
  for (int j = 0; j < num_dense; ++j) {
    const float* values = dense_value_.data() + static_cast<size_t>(j) * kNormalLevels;
    const float mean = dense_mean_[j];
    const float weight = dense_weight_[j];
    float* dense = out->dense.data() + j;
    for (int b = 0; b < n; ++b) {
      const uint64_t h = SlotHash(b, num_sparse + j);
      const bool missing = static_cast<uint32_t>((h >> kNormalBits) & 0xFFFFF) < missing_threshold_;
      const float x = missing ? 0.0f : values[h & kLevelMask];
      dense[static_cast<size_t>(b) * num_dense] = x;
      logit_[b] += weight * (x - mean);
    }
  }
}

void SyntheticGenerator::LabelPass(int n, Batch* out) {
  const uint64_t slot = static_cast<uint64_t>(num_sparse() + config_.num_dense);
  const double flip = config_.label_flip_prob;
  for (int b = 0; b < n; ++b) {
    const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(logit_[b])));
    const double p_label = flip + (1.0 - 2.0 * flip) * p;
    out->labels[b] = UnitDoubleFromMantissa(SlotHash(b, slot)) < p_label ? 1.0f : 0.0f;
    out->oracle_prob[b] = static_cast<float>(p_label);
  }
}

}  // namespace osprey::data
