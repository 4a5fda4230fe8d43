#include "common/codec/codec_config.h"

#include <cmath>
#include <sstream>

namespace osprey::codec {
namespace {

template <typename T>
Status Bad(const std::string& field, const T& value, const std::string& why) {
  std::ostringstream os;
  os << "compression." << field << " = " << value << ": " << why;
  return InvalidArgument(os.str());
}

Status BadName(const std::string& field, const std::string& value, const std::string& allowed) {
  return InvalidArgument("compression." + field + " = \"" + value + "\": must be one of " + allowed);
}

bool OneOf(const std::string& v, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (v == n) return true;
  }
  return false;
}

bool IsSparse(const std::string& type) { return type == "topk" || type == "randomk"; }

Status ValidateSparse(const CodecConfig& c) {
  if (!(c.density > 0.0 && c.density <= 1.0)) return Bad("density", c.density, "must be in (0, 1]");
  if (!OneOf(c.value_type, {"fp32", "fp16", "bf16"})) return BadName("value_type", c.value_type, "fp32|fp16|bf16");
  if (c.type != "topk") return Status::OK();
  if (!OneOf(c.topk_method, {"exact", "sample", "histogram"})) {
    return BadName("topk_method", c.topk_method, "exact|sample|histogram");
  }
  if (!OneOf(c.select, {"magnitude", "importance"})) return BadName("select", c.select, "magnitude|importance");
  if (c.select == "importance" && c.topk_method != "exact") {
    return Bad("select", c.select, "needs topk_method exact, not " + c.topk_method);
  }
  if (!(c.sample_rate > 0.0 && c.sample_rate <= 1.0)) return Bad("sample_rate", c.sample_rate, "must be in (0, 1]");
  if (!(c.count_tolerance >= 0.0 && c.count_tolerance < 1.0)) {
    return Bad("count_tolerance", c.count_tolerance, "must be in [0, 1)");
  }
  return Status::OK();
}

Status ValidateSchedule(const CodecConfig& c) {
  const DensityScheduleConfig& s = c.schedule;
  if (!OneOf(s.type, {"none", "warmup", "anneal"})) return BadName("schedule.type", s.type, "none|warmup|anneal");
  if (s.type == "none") return Status::OK();
  if (!IsSparse(c.type)) return Bad("schedule.type", s.type, "needs type topk or randomk, not " + c.type);
  if (s.steps == 0) return Bad("schedule.steps", s.steps, "must be > 0 for a " + s.type + " schedule");
  if (!(s.start_density >= c.density && s.start_density <= 1.0)) {
    return Bad("schedule.start_density", s.start_density, "must be in [density, 1]");
  }
  return Status::OK();
}

Status ValidateAdaptive(const CodecConfig& c) {
  const AdaptiveRatioConfig& a = c.adaptive_ratio;
  if (!a.enabled) return Status::OK();
  if (!IsSparse(c.type)) {
    return Bad("adaptive_ratio", "{...}", "needs type topk or randomk (a density to move), not " + c.type);
  }
  if (!(a.min_density > 0.0 && a.min_density <= c.density)) {
    return Bad("adaptive_ratio.min_density", a.min_density, "must be in (0, density = " + std::to_string(c.density) + "]");
  }
  if (!(a.max_density >= c.density && a.max_density <= 1.0)) {
    return Bad("adaptive_ratio.max_density", a.max_density, "must be in [density = " + std::to_string(c.density) + ", 1]");
  }
  if (a.target != "median_step_time") return BadName("adaptive_ratio.target", a.target, "median_step_time");
  if (!(a.margin > 0.0 && a.margin < 1.0)) return Bad("adaptive_ratio.margin", a.margin, "must be in (0, 1)");
  if (!(a.factor > 1.0 && a.factor <= 10.0)) return Bad("adaptive_ratio.factor", a.factor, "must be in (1, 10]");
  if (a.interval_steps == 0) return Bad("adaptive_ratio.interval_steps", a.interval_steps, "must be >= 1");
  return Status::OK();
}

}  // namespace

Status ValidateCodecConfig(const CodecConfig& c) {
  if (!OneOf(c.type, {"none", "fp16", "bf16", "topk", "randomk", "onebit"})) {
    return BadName("type", c.type, "none|fp16|bf16|topk|randomk|onebit");
  }
  if (IsSparse(c.type)) OSPREY_RETURN_IF_ERROR(ValidateSparse(c));
  if (c.select != "magnitude" && c.type != "topk") return Bad("select", c.select, "needs type topk, not " + c.type);
  if (c.type == "onebit" && (c.onebit_chunk == 0 || c.onebit_chunk % 32 != 0)) {
    return Bad("onebit_chunk", c.onebit_chunk, "must be a positive multiple of 32");
  }
  if (!(c.dgc_momentum >= 0.0f && c.dgc_momentum < 1.0f)) return Bad("dgc_momentum", c.dgc_momentum, "must be in [0, 1)");
  if (c.dgc_momentum > 0.0f && !c.error_feedback) {
    return Bad("dgc_momentum", c.dgc_momentum, "needs error_feedback = true (momentum correction accumulates)");
  }
  if (c.dgc_momentum > 0.0f && !IsSparse(c.type)) {
    return Bad("dgc_momentum", c.dgc_momentum, "needs type topk or randomk (masking needs sent indices), not " + c.type);
  }
  if (!(c.clip_norm >= 0.0f && std::isfinite(c.clip_norm))) return Bad("clip_norm", c.clip_norm, "must be >= 0 and finite");
  OSPREY_RETURN_IF_ERROR(ValidateSchedule(c));
  if (!OneOf(c.granularity, {"tensor", "bucket", "layer"})) {
    return BadName("granularity", c.granularity, "tensor|bucket|layer");
  }
  if (c.layer_min_k == 0) return Bad("layer_min_k", c.layer_min_k, "must be >= 1");
  if (c.granularity == "bucket" && (c.bucket_bytes == 0 || c.bucket_bytes % 4 != 0)) {
    return Bad("bucket_bytes", c.bucket_bytes, "must be a positive multiple of 4");
  }
  OSPREY_RETURN_IF_ERROR(ValidateAdaptive(c));
  return Status::OK();
}

}  // namespace osprey::codec
