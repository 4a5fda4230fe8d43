#include "common/codec/gradient_compressor.h"

#include <algorithm>
#include <numeric>

#include "common/codec/codec_math.h"

namespace osprey::codec {

std::vector<EncodeUnit> PlanUnits(const CodecConfig& config, const std::vector<size_t>& tensor_lengths) {
  std::vector<EncodeUnit> units;
  auto add = [&](size_t offset, size_t length) {
    const bool big = length * sizeof(float) >= config.min_compress_bytes;
    units.push_back(EncodeUnit{offset, length, big && config.type != "none"});
  };
  if (config.granularity == "bucket") {
    const size_t total = std::accumulate(tensor_lengths.begin(), tensor_lengths.end(), size_t{0});
    const size_t bucket = config.bucket_bytes / sizeof(float);
    for (size_t offset = 0; offset < total; offset += bucket) add(offset, std::min(bucket, total - offset));
    return units;
  }
  size_t offset = 0;
  for (size_t length : tensor_lengths) {
    add(offset, length);
    offset += length;
  }
  return units;
}

StatusOr<std::unique_ptr<GradientCompressor>> GradientCompressor::Create(const CodecConfig& config,
                                                                        const std::vector<size_t>& tensor_lengths,
                                                                        uint64_t seed) {
  std::unique_ptr<GradientCompressor> c(new GradientCompressor());
  OSPREY_ASSIGN_OR_RETURN(c->lossy_, MakeCodec(config));
  CodecConfig plain;
  plain.type = "none";
  OSPREY_ASSIGN_OR_RETURN(c->plain_, MakeCodec(plain));
  c->units_ = PlanUnits(config, tensor_lengths);
  c->states_.resize(c->units_.size());
  for (size_t u = 0; u < c->states_.size(); ++u) c->states_[u].tensor_seed = Mix64(seed + u);
  c->total_length_ = std::accumulate(tensor_lengths.begin(), tensor_lengths.end(), size_t{0});
  return c;
}

Status GradientCompressor::EncodeUnitAt(size_t unit, const float* flat, Encoded* out) {
  if (unit >= units_.size()) {
    return OutOfRange("unit " + std::to_string(unit) + " of " + std::to_string(units_.size()));
  }
  const EncodeUnit& u = units_[unit];
  const Codec& codec = u.compressed ? *lossy_ : *plain_;
  return codec.Encode(flat + u.offset, u.length, &states_[unit], out);
}

Status GradientCompressor::DecodeAddUnit(size_t unit, const EncodedView& in, float* flat_dst, float scale) const {
  if (unit >= units_.size()) {
    return OutOfRange("unit " + std::to_string(unit) + " of " + std::to_string(units_.size()));
  }
  const EncodeUnit& u = units_[unit];
  const Codec& codec = u.compressed ? *lossy_ : *plain_;
  return codec.DecodeAdd(in, flat_dst + u.offset, u.length, scale);
}

}  // namespace osprey::codec
