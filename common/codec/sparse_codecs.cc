#include "common/codec/sparse_codecs.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/codec/dense_codecs.h"

namespace osprey::codec {
namespace {

void StoreValue(uint8_t* values, ValueType type, size_t i, float v) {
  StoreValues(&v, 1, type, values + i * ValueBytes(type));
}

void StartSparse(CodecId id, ValueType type, size_t n, size_t count, Encoded* out) {
  out->meta = EncodedMeta{id, type, n, count, 0};
  out->payload.resize(count * (4 + ValueBytes(type)));
}

// The schedule's density at the state's step, times the caller's adaptive scale, capped at 1.
double ScaledDensity(const DensitySchedule& schedule, uint64_t step, const CodecState& state) {
  return std::min(1.0, schedule.DensityAt(step) * state.density_scale);
}

}  // namespace

double FlooredDensity(double density, size_t n, uint64_t min_k) {
  if (n == 0 || min_k <= 1) return density;
  return std::max(density, std::min(1.0, static_cast<double>(min_k) / static_cast<double>(n)));
}

void ImportanceScores(const float* x, size_t n, float* fisher, float* scores) {
  const float d = static_cast<float>(kFisherDecay), e = 1.0f - d;
  for (size_t i = 0; i < n; ++i) {
    fisher[i] = d * fisher[i] + e * (x[i] * x[i]);
    scores[i] = x[i] / std::sqrt(std::sqrt(fisher[i]) + 1e-30f);
  }
}

TopKMethod TopKMethodFromName(const std::string& name) {
  if (name == "sample") return TopKMethod::kSample;
  if (name == "histogram") return TopKMethod::kHistogram;
  return TopKMethod::kExact;
}

void WriteSelected(const float* x, size_t n, const Selection& sel, CodecId id, ValueType type, Encoded* out,
                   const float* rank) {
  StartSparse(id, type, n, sel.count, out);
  uint8_t* indices = out->payload.data();
  uint8_t* values = indices + 4 * sel.count;
  size_t pos = 0;
  const float* keys = rank != nullptr ? rank : x;
  for (size_t i = 0; i < n && pos < sel.count; ++i) {
    const uint32_t index = static_cast<uint32_t>(i);
    if (!sel.Selects(MagnitudeKey(keys[i]), index)) continue;
    std::memcpy(indices + 4 * pos, &index, sizeof(index));
    StoreValue(values, type, pos, x[i]);
    ++pos;
  }
}

Selection TopKCodec::Select(const float* x, size_t n, uint64_t step, uint64_t tensor_seed, CodecState* state) const {
  const double density = FlooredDensity(ScaledDensity(options_.schedule, step, *state), n, state->min_k);
  switch (options_.method) {
    case TopKMethod::kExact:
      return SelectExact(x, n, MakeTargets(n, density, 0.0).k, &state->scratch_keys);
    case TopKMethod::kHistogram: {
      auto& keys = state->scratch_keys;
      keys.resize(n);
      for (size_t i = 0; i < n; ++i) keys[i] = MagnitudeKey(x[i]);
      return RadixSelect(keys.data(), nullptr, n, 0, MakeTargets(n, density, options_.count_tolerance));
    }
    case TopKMethod::kSample: {
      const SelectTargets t = MakeTargets(n, density, options_.count_tolerance);
      const SamplePlan plan = MakeSamplePlan(n, t, options_.sample_rate, options_.count_tolerance);
      const uint64_t seed = StepSeed(options_.seed ^ tensor_seed, step);
      return SelectSampled(x, n, t, plan, seed, &state->sample_scratch);
    }
  }
  return Selection{};
}

Status TopKCodec::Encode(const float* g, size_t n, CodecState* state, Encoded* out) const {
  OSPREY_RETURN_IF_ERROR(CheckTensorLength(n));
  if (n == 0) {
    StartSparse(CodecId::kTopK, options_.value_type, 0, 0, out);
    return Status::OK();
  }
  if (options_.importance) {
    OSPREY_RETURN_IF_ERROR(PrepareStateBuffer("fisher", n, &state->fisher));
    state->scores.resize(n);
    ImportanceScores(g, n, state->fisher.data(), state->scores.data());
    const Selection sel = Select(state->scores.data(), n, state->step, state->tensor_seed, state);
    WriteSelected(g, n, sel, CodecId::kTopK, options_.value_type, out, state->scores.data());
    return Status::OK();
  }
  const Selection sel = Select(g, n, state->step, state->tensor_seed, state);
  WriteSelected(g, n, sel, CodecId::kTopK, options_.value_type, out);
  return Status::OK();
}

Status TopKCodec::DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const {
  OSPREY_RETURN_IF_ERROR(CheckCodecId(CodecId::kTopK, in));
  return DecodeAddFrame(in, dst, n, scale);
}

Status RandomKCodec::Encode(const float* g, size_t n, CodecState* state, Encoded* out) const {
  OSPREY_RETURN_IF_ERROR(CheckTensorLength(n));
  const uint64_t k =
      n == 0 ? 0 : MakeTargets(n, FlooredDensity(ScaledDensity(options_.schedule, state->step, *state), n, state->min_k), 0.0).k;
  StartSparse(CodecId::kRandomK, options_.value_type, n, k, out);
  uint8_t* indices = out->payload.data();
  uint8_t* values = indices + 4 * k;
  const uint64_t seed = StepSeed(options_.seed ^ state->tensor_seed, state->step);
  for (uint64_t j = 0; j < k; ++j) {
    const uint32_t index = static_cast<uint32_t>(StratifiedPosition(seed, j, k, n));
    std::memcpy(indices + 4 * j, &index, sizeof(index));
    StoreValue(values, options_.value_type, j, g[index]);
  }
  return Status::OK();
}

Status RandomKCodec::DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const {
  OSPREY_RETURN_IF_ERROR(CheckCodecId(CodecId::kRandomK, in));
  return DecodeAddFrame(in, dst, n, scale);
}

}  // namespace osprey::codec
