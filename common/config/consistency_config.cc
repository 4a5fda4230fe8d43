#include "common/config/consistency_config.h"

#include "common/config/yaml_fields.h"

namespace osprey::config {

const char* ConsistencyModeName(ConsistencyMode mode) {
  switch (mode) {
    case ConsistencyMode::kBsp: return "bsp";
    case ConsistencyMode::kSsp: return "ssp";
    case ConsistencyMode::kAsync: return "async";
  }
  return "unknown";
}

const char* MergeReduceName(MergeReduce reduce) {
  return reduce == MergeReduce::kMean ? "mean" : reduce == MergeReduce::kSum ? "sum" : "unknown";
}

const char* LrScaleName(LrScale scale) {
  return scale == LrScale::kNone ? "none" : scale == LrScale::kInverse ? "inverse" : "unknown";
}

const char* NonFiniteName(NonFinite policy) {
  return policy == NonFinite::kReject ? "reject" : policy == NonFinite::kSkipRow ? "skip_row" : "unknown";
}

void ParseConsistency(YamlFields& f, ConsistencyConfig* c) {
  f.GetEnum("mode", &c->mode,
            {{"bsp", ConsistencyMode::kBsp}, {"ssp", ConsistencyMode::kSsp}, {"async", ConsistencyMode::kAsync}});
  f.Get("staleness_bound", &c->staleness_bound, 0, 1 << 20);
  f.Get("merge_window_us", &c->merge_window_us, 0, int64_t{3600} * 1000000);
  f.Get("merge_max_pushes", &c->merge_max_pushes, 1, 1 << 20);
  f.GetEnum("merge_reduce", &c->merge_reduce, {{"mean", MergeReduce::kMean}, {"sum", MergeReduce::kSum}});
  f.GetEnum("lr_scale", &c->lr_scale, {{"none", LrScale::kNone}, {"inverse", LrScale::kInverse}});
  f.Get("momentum_decay", &c->momentum_decay);
  f.Get("dc_lambda", &c->dc_lambda, 0, 1e6);
  f.Get("drop_above", &c->drop_above, -1, int64_t{1} << 40);
  f.GetEnum("non_finite", &c->non_finite, {{"reject", NonFinite::kReject}, {"skip_row", NonFinite::kSkipRow}});
}

void ParseCheckpoint(YamlFields& f, CheckpointConfig* c) {
  f.Get("dir", &c->dir);
  f.Get("every_steps", &c->every_steps, 0, int64_t{1} << 40);
  f.Get("every_seconds", &c->every_seconds, 0, 1 << 30);
}

}  // namespace osprey::config
