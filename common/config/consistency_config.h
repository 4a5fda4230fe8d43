// Per-table consistency (merge-then-apply) and staleness settings, and the job's checkpoint
// settings: the typed form of `tables[].consistency` and `checkpoint` in a job config. Every
// choice is an enum parsed at load time (an unknown name is refused there, naming the file and
// key path). The exact mode rules and policy formulas are in server/table_shard.h; checkpoints
// in server/checkpoint.h.
#pragma once

#include <cstdint>
#include <string>

namespace osprey::config {

class YamlFields;

enum class ConsistencyMode { kBsp, kSsp, kAsync };
enum class MergeReduce { kMean, kSum };  // of the pushes merged in one window
enum class LrScale { kNone, kInverse };  // inverse: lr / max(1, s)
enum class NonFinite { kReject, kSkipRow };

// The config names ("bsp", "mean", "inverse", "skip_row", ...).
const char* ConsistencyModeName(ConsistencyMode mode);
const char* MergeReduceName(MergeReduce reduce);
const char* LrScaleName(LrScale scale);
const char* NonFiniteName(NonFinite policy);

struct ConsistencyConfig {
  ConsistencyMode mode = ConsistencyMode::kAsync;
  int staleness_bound = 4;          // ssp: a worker may run this many clocks ahead of the slowest
  int64_t merge_window_us = 0;      // ssp/async: a window closes after this long (0: no time limit)
  int merge_max_pushes = 1;         // ssp/async: ... or after this many pushes (1: apply per push;
                                    // > 1 with merge_window_us 0 keeps a partial window open until
                                    // more pushes come)
  MergeReduce merge_reduce = MergeReduce::kMean;
  // Staleness policies (combinable).
  LrScale lr_scale = LrScale::kNone;
  bool momentum_decay = false;      // mu_eff = max(0, mu - s_mean / (s_mean + 1))
  float dc_lambda = 0.0f;           // DC-ASGD: g + dc_lambda * g*g*(w_now - w_at_pull); 0: off
  int64_t drop_above = -1;          // >= 0: drop pushes with staleness above this
  NonFinite non_finite = NonFinite::kReject;
};

struct CheckpointConfig {
  std::string dir;                  // where checkpoints go; empty: checkpoints off
  int64_t every_steps = 0;          // 0: off; bsp: every this many clocks, a cut across servers;
                                    // else optimizer steps of the server's busiest table
  int every_seconds = 0;            // 0: off
};

// Reads `consistency` mappings and the `checkpoint` section (consistency_config.cc).
void ParseConsistency(YamlFields& f, ConsistencyConfig* c);
void ParseCheckpoint(YamlFields& f, CheckpointConfig* c);

}  // namespace osprey::config
