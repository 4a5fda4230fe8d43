#include "common/config/consistency_config.h"

#include "common/config/yaml_fields.h"

namespace osprey::config {

void ParseConsistency(YamlFields& f, ConsistencyConfig* c) {
  f.Get("mode", &c->mode, {"bsp", "ssp", "async"});
  f.Get("staleness_bound", &c->staleness_bound, 0, 1 << 20);
  f.Get("merge_window_us", &c->merge_window_us, 0, int64_t{3600} * 1000000);
  f.Get("merge_max_pushes", &c->merge_max_pushes, 1, 1 << 20);
  f.Get("merge_reduce", &c->merge_reduce, {"mean", "sum"});
  f.Get("lr_scale", &c->lr_scale, {"none", "inverse"});
  f.Get("momentum_decay", &c->momentum_decay);
  f.Get("dc_lambda", &c->dc_lambda, 0, 1e6);
  f.Get("drop_above", &c->drop_above, -1, int64_t{1} << 40);
  f.Get("non_finite", &c->non_finite, {"reject", "skip_row"});
}

void ParseCheckpoint(YamlFields& f, CheckpointConfig* c) {
  f.Get("dir", &c->dir);
  f.Get("every_steps", &c->every_steps, 0, int64_t{1} << 40);
  f.Get("every_seconds", &c->every_seconds, 0, 1 << 30);
}

}  // namespace osprey::config
