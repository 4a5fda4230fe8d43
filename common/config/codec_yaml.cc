#include "common/config/codec_yaml.h"

#include <limits>

#include "common/config/yaml_fields.h"

namespace osprey::config {

void ParseCodec(YamlFields& f, codec::CodecConfig* c) {
  f.Get("type", &c->type, {"none", "fp16", "bf16", "topk", "randomk", "onebit"});
  f.Get("density", &c->density, 0, 1, /*lo_open=*/true);
  f.Get("topk_method", &c->topk_method, {"exact", "sample", "histogram"});
  f.Get("select", &c->select, {"magnitude", "importance"});
  f.Get("sample_rate", &c->sample_rate, 0, 1, /*lo_open=*/true);
  f.Get("count_tolerance", &c->count_tolerance, 0, 1);
  f.Get("value_type", &c->value_type, {"fp32", "fp16", "bf16"});
  uint64_t chunk = c->onebit_chunk;
  f.Get("onebit_chunk", &chunk, 0, uint64_t{1} << 30);
  c->onebit_chunk = static_cast<uint32_t>(chunk);
  f.Get("seed", &c->seed, 0, std::numeric_limits<uint64_t>::max());
  f.Get("error_feedback", &c->error_feedback);
  f.Get("dgc_momentum", &c->dgc_momentum, 0, 1);
  f.Get("clip_norm", &c->clip_norm, 0, 1e30);
  uint64_t min_bytes = c->min_compress_bytes;
  f.Get("min_compress_bytes", &min_bytes, 0, uint64_t{1} << 40);
  c->min_compress_bytes = min_bytes;
  f.Get("granularity", &c->granularity, {"tensor", "bucket", "layer"});
  f.Get("layer_min_k", &c->layer_min_k, 1, uint64_t{1} << 32);
  uint64_t bucket = c->bucket_bytes;
  f.Get("bucket_bytes", &bucket, 0, uint64_t{1} << 40);
  c->bucket_bytes = bucket;
  f.Section("schedule", [&](YamlFields& s) {
    s.Get("type", &c->schedule.type, {"none", "warmup", "anneal"});
    s.Get("start_density", &c->schedule.start_density, 0, 1, /*lo_open=*/true);
    s.Get("steps", &c->schedule.steps, 0, uint64_t{1} << 40);
  });
  // Adaptive per-node density (issue 18): bounds are checked against density by
  // ValidateCodecConfig, which sees the whole codec.
  if (f.Has("adaptive_ratio")) c->adaptive_ratio.enabled = true;
  f.Section("adaptive_ratio", [&](YamlFields& a) {
    a.Get("min_density", &c->adaptive_ratio.min_density, 0, 1, /*lo_open=*/true);
    a.Get("max_density", &c->adaptive_ratio.max_density, 0, 1, /*lo_open=*/true);
    a.Get("target", &c->adaptive_ratio.target, {"median_step_time"});
    a.Get("margin", &c->adaptive_ratio.margin, 0, 1, /*lo_open=*/true);
    a.Get("factor", &c->adaptive_ratio.factor, 1, 10, /*lo_open=*/true);
    a.Get("interval_steps", &c->adaptive_ratio.interval_steps, 1, uint64_t{1} << 40);
    a.Get("async_barrier", &c->adaptive_ratio.async_barrier);
  });
}

}  // namespace osprey::config
