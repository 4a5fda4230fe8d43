// Updater: one table's optimizer step applied to the rows and chunks a Store hands out.
//
// The Store keeps records (weights + opaque optimizer state + update history); the Updater is the
// only code that interprets the state: it gives the store the state's layout (state_layout, for
// CreateTable), runs server/optim's batched kernels (Optimizer::ApplyRows) on each RowBlock the
// store visits, records the step's version in the rows' history, and reads that history back as
// per-row staleness (RowStaleness). So a backend implements storage only, and every backend gets the same
// optimizer results bit for bit.
//
// Errors: whatever the store's Visit* returns (a failed block write-back); the optimizer itself
// never fails. On an error, the blocks visited before it are updated and written (a window's apply
// is not atomic across blocks: TableShard treats a failed apply as the table's failure).
//
// Thread-safety: an Updater is immutable; its calls use the store, so they run where the store may
// be used (under the server's work lock), and ApplyRowsById's pool threads only while it runs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "server/apply_pool.h"
#include "server/optim/optimizer.h"
#include "server/store.h"

namespace osprey::server {

// What one optimizer step on sparse rows applies besides the gradients.
struct RowUpdate {
  RowUpdate(const ApplyOptions& o = ApplyOptions{}) : options(o) {}  // NOLINT: implicit on purpose
  ApplyOptions options;                        // every row, unless row_options is set
  const ApplyOptions* row_options = nullptr;   // n entries, one per key (per-row staleness policies)
  // The table version this step creates (TableShard::version() after it). When > 0 it is
  // recorded as the rows' latest update, which RowStaleness counts; 0 records nothing.
  uint64_t version = 0;
};

class Updater {
 public:
  // InvalidArgument for a bad optimizer config (Optimizer::Make).
  static StatusOr<std::unique_ptr<Updater>> Make(const OptimizerConfig& config);

  // The optimizer state's layout, for StoreTableSpec::state. Valid after the Updater dies.
  StateLayout state_layout() const;
  const Optimizer& optimizer() const { return *optimizer_; }

  // One optimizer step per key of `table` with gradient grads[i*dim] (contiguous) or gp[i]
  // (anywhere); missing rows are created. Duplicate keys get one step each, in order.
  Status ApplyRows(Store* store, uint32_t table, const uint64_t* keys, size_t n, size_t dim,
                   const float* grads, const RowUpdate& update) const;
  Status ApplyRows(Store* store, uint32_t table, const uint64_t* keys, size_t n, size_t dim,
                   const float* const* gp, const RowUpdate& update) const;
  // The same by row id (Store::has_row_ids), gradient gp[i] for row ids[i]. With a `pool` of
  // several threads and a store that allows it (Store::concurrent_row_visits), large steps are
  // spread over the pool in contiguous ranges of ids (same bits as one thread); the ids must
  // then be distinct (a merged window's are), or two threads could step one row.
  Status ApplyRowsById(Store* store, uint32_t table, const uint32_t* ids, size_t n, size_t dim,
                       const float* const* gp, const RowUpdate& update,
                       ApplyPool* pool = nullptr) const;
  // One step per owned dense chunk chunks[i]; gradients contiguous (grads) or at gp[i].
  Status ApplyChunks(Store* store, uint32_t table, const uint64_t* chunks, size_t n,
                     const float* grads, const ApplyOptions& options) const;
  Status ApplyChunks(Store* store, uint32_t table, const uint64_t* chunks, size_t n,
                     const float* const* gp, const ApplyOptions& options) const;

  // Per-row staleness of a row with update history `history` (nullptr: the row does not exist):
  // the number of steps with a version > `since` that updated it: exact below kRowHistory; when
  // every remembered update is newer than `since` the row was updated at least kRowHistory times
  // and the result is max(kRowHistory, cap) (the caller passes the table's staleness, an upper
  // bound). A row that does not exist yet, or was restored from a checkpoint (no history), gives 0.
  static uint64_t RowStaleness(const uint64_t* history, uint64_t since, uint64_t cap) {
    uint64_t s = 0;
    if (history == nullptr) return s;
    while (s < static_cast<uint64_t>(kRowHistory) && history[s] > since) ++s;
    return s == static_cast<uint64_t>(kRowHistory) ? std::max<uint64_t>(s, cap) : s;
  }

 private:
  explicit Updater(std::shared_ptr<const Optimizer> optimizer) : optimizer_(std::move(optimizer)) {}

  const std::shared_ptr<const Optimizer> optimizer_;
};

}  // namespace osprey::server
