// RowLifecycle: feature admission and eviction of one sparse table's rows on one server, over any
// Store (store.h), for TableShard. Built on the pure CountMinSketch and Eviction.
//
// Admission (config admission.min_count N > 1). Only PUSHES count: every occurrence of a key
// without a row in a push is one sighting in the sketch; the sighting that brings its estimate to
// N admits it (its gradient in that push is merged and creates the row), earlier ones drop the
// key's gradient row (counted in gradients_dropped). Pulls do not count: a worker pulls every key
// of a batch right before pushing it, so counting both would halve N, and evaluation pulls would
// admit keys that were never trained. A pull of a key without a row is answered with the
// initializer's row (row_init.h, what the store would create) and creates nothing. Since the
// sketch never forgets, a key evicted after admission is admitted again at its next push.
//
// Eviction (eviction.ttl_steps / ttl_seconds / max_rows): every applied window's keys are
// touched at the version it creates and the shard's clock; after each applied window a sweep
// deletes (Store::EraseRows) the rows past a TTL -- at most kSweepRows per window, the rest at the
// next windows -- and the least recently updated ones beyond max_rows. A table with eviction or
// admission never creates rows on pulls (missing rows are served from the initializer), so every
// row exists because a push updated it and is tracked from that update.
//
// Checkpoints: SaveState / RestoreState carry the sketch and each row's last update (its step,
// and its age at the save, so a restore on another process's clock keeps the ages).
//
// Thread-safety: none (the shard's caller holds the server's work lock); counters are atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config/table_config.h"
#include "common/status.h"
#include "server/admission/count_min_sketch.h"
#include "server/admission/eviction.h"
#include "server/store.h"

namespace osprey::server::admission {

// Server-wide (ServerCounters::lifecycle), read from any thread.
struct LifecycleCounters {
  std::atomic<uint64_t> admitted{0};           // keys that got a row by admission
  std::atomic<uint64_t> gradients_dropped{0};  // gradient rows of keys not admitted yet
  std::atomic<uint64_t> evicted_ttl{0};
  std::atomic<uint64_t> evicted_cap{0};
};

class RowLifecycle {
 public:
  // Rows deleted by TTL per sweep (one sweep per applied window).
  static constexpr size_t kSweepRows = 65536;

  // Null when `config` has neither admission nor eviction. `store` and `counters` are borrowed.
  // FailedPrecondition when eviction is asked of a store without EraseRows.
  static StatusOr<std::unique_ptr<RowLifecycle>> Make(uint32_t table,
                                                      const config::TableConfig& config,
                                                      Store* store, LifecycleCounters* counters);
  RowLifecycle(uint32_t table, const config::TableConfig& config, Store* store,
               LifecycleCounters* counters);

  bool admission() const { return sketch_.has_value(); }
  bool eviction() const { return eviction_.has_value(); }

  // Leaves the rows of not-yet-admitted keys out of a push of *n keys (gradients *g, dim floats
  // each): *keys / *g then point into this object's scratch (valid until the next call).
  Status FilterPush(const uint64_t** keys, size_t* n, const float** g);
  // The weights of each key's row into out[i*dim]: the stored row, or the initializer's for a key
  // without one (nothing is created).
  Status Pull(const uint64_t* keys, size_t n, float* out);
  // A window that created version `step` at `now_us` updated `keys`: touch them, then sweep.
  Status Applied(const uint64_t* keys, size_t n, uint64_t step, int64_t now_us);

  // The checkpointed state (see the file comment), ages relative to `now_us`.
  std::string SaveState(int64_t now_us) const;
  // Restores from the states saved by the checkpoint's files: `own` is this server's file's when
  // the server count did not change (else null: the sketches of all files are summed, which keeps
  // every estimate an upper bound). Rows are tracked only when the store has them (records this
  // server restored). DataLoss naming `what` for a corrupt state.
  Status RestoreState(const std::vector<std::string>& states, const std::string* own,
                      int64_t now_us, const std::string& what);

  // Test access.
  const CountMinSketch* sketch() const { return sketch_ ? &*sketch_ : nullptr; }
  const Eviction* evictor() const { return eviction_ ? &*eviction_ : nullptr; }

 private:
  Status Erase(const std::vector<uint64_t>& keys);

  const uint32_t table_;
  const int dim_;
  const uint32_t min_count_;
  const config::InitConfig init_;
  Store* const store_;
  LifecycleCounters* const counters_;
  std::optional<CountMinSketch> sketch_;
  std::optional<Eviction> eviction_;
  std::vector<uint64_t> kept_keys_;
  std::vector<float> kept_g_;
  std::vector<uint8_t> has_row_;
  Eviction::Evicted evicted_;
};

}  // namespace osprey::server::admission
