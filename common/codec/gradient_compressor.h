// Splits a model's gradient into encode units and encodes each unit with its own state.
//
// The model's tensors are laid out back to back in one flat float buffer. With granularity
// "tensor" every tensor is a unit (layer-wise k); with "bucket" the flat buffer is cut into units
// of bucket_bytes regardless of tensor boundaries. Units smaller than min_compress_bytes, and all
// units when the codec is "none", are sent with the "none" codec: compressing them saves fewer
// bytes than their per-frame overhead.
//
// Ownership: owns both codecs and one CodecState per unit.
// Thread-safety: EncodeUnit calls for distinct units may run concurrently; calls for the same
// unit must be serialized by the caller. DecodeAddUnit is const and thread-safe (dst aside).
#pragma once

#include <memory>
#include <vector>

#include "common/codec/codec.h"

namespace osprey::codec {

struct EncodeUnit {
  size_t offset = 0;  // first element in the flat buffer
  size_t length = 0;
  bool compressed = false;  // false: encoded with "none"
};

// The units for `tensor_lengths` under `config` (which must be valid).
std::vector<EncodeUnit> PlanUnits(const CodecConfig& config, const std::vector<size_t>& tensor_lengths);

class GradientCompressor {
 public:
  // Errors: InvalidArgument from config validation.
  static StatusOr<std::unique_ptr<GradientCompressor>> Create(const CodecConfig& config,
                                                              const std::vector<size_t>& tensor_lengths,
                                                              uint64_t seed);

  const std::vector<EncodeUnit>& units() const { return units_; }
  size_t total_length() const { return total_length_; }

  // Encodes unit `unit` of `flat` (total_length() elements) into *out.
  // Errors: OutOfRange for a bad unit index; the codec's errors.
  Status EncodeUnitAt(size_t unit, const float* flat, Encoded* out);

  // Validates `in` and adds scale * decoded into the unit's range of flat_dst.
  Status DecodeAddUnit(size_t unit, const EncodedView& in, float* flat_dst, float scale) const;

  // The state of a unit, for inspection (residual norms, step).
  const CodecState& state(size_t unit) const { return states_[unit]; }

 private:
  GradientCompressor() = default;

  std::unique_ptr<Codec> lossy_;
  std::unique_ptr<Codec> plain_;
  std::vector<EncodeUnit> units_;
  std::vector<CodecState> states_;
  size_t total_length_ = 0;
};

}  // namespace osprey::codec
