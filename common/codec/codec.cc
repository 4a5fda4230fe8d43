#include "common/codec/codec.h"

#include "common/codec/decorators.h"
#include "common/codec/dense_codecs.h"
#include "common/codec/onebit_codec.h"
#include "common/codec/sparse_codecs.h"

namespace osprey::codec {
namespace {

// Names were validated, so every branch here is reachable only with a known name.
std::unique_ptr<Codec> MakeBase(const CodecConfig& c) {
  if (c.type == "fp16") return std::make_unique<DenseCodec>(CodecId::kFp16, ValueType::kFp16);
  if (c.type == "bf16") return std::make_unique<DenseCodec>(CodecId::kBf16, ValueType::kBf16);
  if (c.type == "onebit") return std::make_unique<OneBitCodec>(c.onebit_chunk);
  if (c.type == "topk" || c.type == "randomk") {
    SparseCodecOptions o;
    o.schedule = DensitySchedule(c.schedule, c.density);
    o.value_type = ValueTypeOfName(c.value_type);
    o.seed = c.seed;
    o.method = TopKMethodFromName(c.topk_method);
    o.sample_rate = c.sample_rate;
    o.count_tolerance = c.count_tolerance;
    o.importance = c.select == "importance";
    if (c.type == "topk") return std::make_unique<TopKCodec>(std::move(o));
    return std::make_unique<RandomKCodec>(std::move(o));
  }
  return std::make_unique<DenseCodec>(CodecId::kNone, ValueType::kFp32);
}

}  // namespace

StatusOr<std::unique_ptr<Codec>> MakeCodec(const CodecConfig& config) {
  OSPREY_RETURN_IF_ERROR(ValidateCodecConfig(config));
  std::unique_ptr<Codec> codec = MakeBase(config);
  // "none" loses nothing, so error feedback would only cost a pass.
  if (config.error_feedback && config.type != "none") {
    codec = std::make_unique<ErrorFeedbackCodec>(std::move(codec));
  }
  if (config.dgc_momentum > 0.0f) codec = std::make_unique<DgcMomentumCodec>(config.dgc_momentum, std::move(codec));
  if (config.clip_norm > 0.0f) codec = std::make_unique<ClipNormCodec>(config.clip_norm, std::move(codec));
  return std::unique_ptr<Codec>(std::make_unique<StepCountingCodec>(std::move(codec)));
}

}  // namespace osprey::codec
