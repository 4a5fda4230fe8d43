#include "worker/compression_diagnostics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/codec/codec_math.h"

namespace osprey::worker {
namespace {

bool IsSparse(codec::CodecId id) { return id == codec::CodecId::kTopK || id == codec::CodecId::kRandomK; }

float LoadValue(const uint8_t* values, codec::ValueType type, size_t i) {
  switch (type) {
    case codec::ValueType::kFp16: {
      uint16_t h;
      std::memcpy(&h, values + 2 * i, 2);
      return codec::HalfBitsToFloat(h);
    }
    case codec::ValueType::kBf16: {
      uint16_t b;
      std::memcpy(&b, values + 2 * i, 2);
      return codec::Bf16BitsToFloat(b);
    }
    default: {
      float v;
      std::memcpy(&v, values + 4 * i, 4);
      return v;
    }
  }
}

double Cosine(double dot, double a2, double b2) {
  if (a2 <= 0 && b2 <= 0) return 1.0;  // nothing to send and nothing sent
  if (a2 <= 0 || b2 <= 0) return 0.0;
  return dot / std::sqrt(a2 * b2);
}

}  // namespace

std::string CompressionWarning(const DiagnosticsSummary& s) {
  if (s.steps == 0) return "";
  const bool bad_cos = s.cosine < kHealthyCosine;
  const bool starved = s.no_update_share > kMaxNoUpdateShare;
  if (!bad_cos && !starved) return "";
  char buf[160];
  std::snprintf(buf, sizeof(buf), "compression unhealthy: cosine %.2f%s, %.0f%% of layer-steps without update%s",
                s.cosine, bad_cos ? " < 0.85" : "", 100.0 * s.no_update_share, starved ? " (> 25%)" : "");
  return buf;
}

void CompressionDiagnostics::StartStream(const Key& key, const Ranges& ranges, size_t n) {
  std::vector<Piece>& pieces = streams_[key];
  pieces.clear();
  std::vector<codec::LayerSegment> segs;
  if (layout_.empty()) {
    segs.push_back({0, 0, n});
  } else {
    segs = codec::LayerSegments(layout_, ranges);
  }
  for (const codec::LayerSegment& s : segs) {
    Piece p;
    p.tensor = s.tensor;
    p.begin = s.begin;
    p.size = s.size;
    p.stride = std::max<size_t>(1, (s.size + max_samples_ - 1) / max_samples_);
    p.samples = (s.size + p.stride - 1) / p.stride;
    p.raw_sum.assign(p.samples, 0.0);
    p.dec_sum.assign(p.samples, 0.0);
    pieces.push_back(std::move(p));
  }
}

Status CompressionDiagnostics::Observe(const Key& key, const float* g, size_t n, const codec::EncodedView& frame) {
  return ObserveImpl(key, g, nullptr, n, frame);
}

std::vector<uint32_t> CompressionDiagnostics::SamplePositions(const Key& key) const {
  std::vector<uint32_t> out;
  auto it = streams_.find(key);
  if (it == streams_.end()) return out;
  for (const Piece& p : it->second) {
    for (size_t s = 0; s < p.samples; ++s) out.push_back(static_cast<uint32_t>(p.begin + s * p.stride));
  }
  return out;
}

Status CompressionDiagnostics::ObserveSamples(const Key& key, const float* samples, size_t num_samples, size_t n,
                                              const codec::EncodedView& frame) {
  size_t expected = 0;
  if (auto it = streams_.find(key); it != streams_.end()) {
    for (const Piece& p : it->second) expected += p.samples;
  }
  if (num_samples != expected) {
    return InvalidArgument("diagnostics: " + std::to_string(num_samples) + " raw samples for a stream that reads " +
                           std::to_string(expected));
  }
  return ObserveImpl(key, nullptr, samples, n, frame);
}

Status CompressionDiagnostics::ObserveImpl(const Key& key, const float* g, const float* samples, size_t n,
                                           const codec::EncodedView& frame) {
  auto it = streams_.find(key);
  if (it == streams_.end() || it->second.empty() || it->second.back().begin + it->second.back().size != n) {
    return FailedPrecondition("diagnostics: stream not started for a message of " + std::to_string(n) + " floats");
  }
  OSPREY_RETURN_IF_ERROR(codec::ValidateMeta(frame.meta, frame.size, n));
  const bool sparse = IsSparse(frame.meta.codec);
  if (!sparse) {
    dense_.assign(n, 0.0f);
    OSPREY_RETURN_IF_ERROR(codec::DecodeAddFrame(frame, dense_.data(), n, 1.0f));
  }
  const size_t count = sparse ? frame.meta.count : 0;
  const uint8_t* values = frame.data + 4 * count;
  size_t j = 0;  // next sparse pair
  for (Piece& p : it->second) {
    double raw_sq = 0, dec_sq = 0;
    bool updated = false;
    for (size_t s = 0; s < p.samples; ++s) {  // age the sums by one step
      p.raw_sum[s] *= decay_;
      p.dec_sum[s] *= decay_;
    }
    for (size_t s = 0; s < p.samples; ++s) {
      const float x = g != nullptr ? g[p.begin + s * p.stride] : *samples++;
      raw_sq += static_cast<double>(x) * x;
      p.raw_sum[s] += x;
    }
    const double scale = static_cast<double>(p.size) / static_cast<double>(p.samples);
    if (sparse) {
      for (; j < count; ++j) {
        uint32_t idx;
        std::memcpy(&idx, frame.data + 4 * j, 4);
        if (idx >= p.begin + p.size) break;
        if (idx < p.begin) return DataLoss("diagnostics: sparse indices not ascending at pair " + std::to_string(j));
        const float v = LoadValue(values, frame.meta.value_type, j);
        dec_sq += static_cast<double>(v) * v;
        updated = updated || v != 0.0f;
        const size_t off = idx - p.begin;
        if (off % p.stride == 0) p.dec_sum[off / p.stride] += v;
      }
    } else {
      for (size_t s = 0; s < p.samples; ++s) {
        const float v = dense_[p.begin + s * p.stride];
        dec_sq += static_cast<double>(v) * v;
        updated = updated || v != 0.0f;
        p.dec_sum[s] += v;
      }
      dec_sq *= scale;
    }
    p.raw_sq = decay_ * p.raw_sq + raw_sq * scale;
    p.dec_sq = decay_ * p.dec_sq + dec_sq;
    p.no_update = decay_ * p.no_update + (updated ? 0.0 : 1.0);
    p.weight = decay_ * p.weight + 1.0;
    ++p.steps;
  }
  return Status::OK();
}

DiagnosticsSummary CompressionDiagnostics::Summary() const {
  DiagnosticsSummary out;
  const size_t tensors = layout_.empty() ? 1 : layout_.size();
  struct Acc {
    double dot = 0, raw2 = 0, dec2 = 0;
    double raw_ms = 0, dec_ms = 0, no_update = 0;  // weighted means, summed over pieces
    int pieces = 0;
  };
  std::vector<Acc> acc(tensors);
  double dot = 0, raw2 = 0, dec2 = 0;
  for (const auto& [key, pieces] : streams_) {
    for (const Piece& p : pieces) {
      if (p.steps == 0) continue;
      Acc& a = acc[p.tensor];
      for (size_t s = 0; s < p.samples; ++s) {
        a.dot += p.raw_sum[s] * p.dec_sum[s];
        a.raw2 += p.raw_sum[s] * p.raw_sum[s];
        a.dec2 += p.dec_sum[s] * p.dec_sum[s];
      }
      a.raw_ms += p.raw_sq / p.weight;
      a.dec_ms += p.dec_sq / p.weight;
      a.no_update += p.no_update / p.weight;
      ++a.pieces;
      out.steps = std::max(out.steps, p.steps);
    }
  }
  if (out.steps == 0) return out;
  double no_update = 0;
  int measured = 0;
  for (size_t t = 0; t < tensors; ++t) {
    const Acc& a = acc[t];
    if (a.pieces == 0) continue;
    LayerDiagnostics d;
    d.name = layout_.empty() ? "dense" : layout_[t].name;
    d.raw_norm = std::sqrt(a.raw_ms);
    d.sent_norm = std::sqrt(a.dec_ms);
    d.cosine = Cosine(a.dot, a.raw2, a.dec2);
    d.no_update_share = a.no_update / a.pieces;
    no_update += d.no_update_share;
    ++measured;
    dot += a.dot;
    raw2 += a.raw2;
    dec2 += a.dec2;
    out.layers.push_back(std::move(d));
  }
  out.cosine = Cosine(dot, raw2, dec2);
  out.no_update_share = measured > 0 ? no_update / measured : 0;
  return out;
}

}  // namespace osprey::worker
