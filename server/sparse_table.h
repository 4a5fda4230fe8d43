// SparseTable: rows of `dim` floats (+ optimizer state) keyed by u64, for NativeStore.
//
// Rows are created on first touch with a deterministic initializer: element i of the row of `key`
// in table `table_id` is a pure function of (init.seed, table_id, key, i), so any server (or a
// restore onto another server count) produces the same initial row.
//
// Each row also has its update history (kRowHistory versions, store.h), in a parallel array indexed
// like the rows (32 bytes per row, not part of the row's record, so not checkpointed), which the
// Updater writes and reads through Visit. The optimizer state is opaque here (StateLayout).
//
// Thread-safety: none (one caller at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/config/table_config.h"
#include "server/huge_pages.h"
#include "server/optim/optimizer.h"  // only for the test constructor's layout
#include "server/store.h"

namespace osprey::server {

class SparseTable {
 public:
  SparseTable(uint32_t table_id, int dim, const config::InitConfig& init, StateLayout state);
  // The same with the state layout of `optimizer` (tests and tools).
  SparseTable(uint32_t table_id, int dim, const config::InitConfig& init,
              std::unique_ptr<Optimizer> optimizer);

  int dim() const { return dim_; }
  // Live rows.
  uint64_t num_rows() const { return num_rows_; }
  // Row ids handed out so far: every id of a live row is below it.
  uint64_t id_bound() const { return next_row_; }

  // Copies the weights of each key's row into out[i*dim] (creating rows as needed).
  void Pull(const uint64_t* keys, size_t n, float* out);
  // Store::VisitRows: rows resolved kRowBlockRows at a time (two-stage prefetch of slots and
  // rows), each block handed to `fn` while its rows are still in cache. Nothing to write back.
  Status Visit(const uint64_t* keys, size_t n, RowAccess access, const RowBlockFn& fn);
  // Row ids (Store::FindOrCreateRowIds): ids[i] = the index of keys[i]'s row, created if missing.
  void FindOrCreateIds(const uint64_t* keys, size_t n, uint32_t* ids);
  // ids[i] = keys[i]'s row id, 0xFFFFFFFF (Store::kNoRowId) where there is no row. Reads only:
  // several threads may call it at once while nothing writes the table.
  void FindIds(const uint64_t* keys, size_t n, uint32_t* ids) const;
  // Store::VisitRowsById (each id < num_rows()). Rows in increasing id order are visited in
  // storage order.
  Status VisitIds(const uint32_t* ids, size_t n, const RowBlockFn& fn);

  // The row of `key` (weights then state), created if missing. Valid until the table dies.
  float* FindOrCreate(uint64_t key);
  // A restore's import: the row of `key`, created without its initial weights and state (the
  // caller overwrites all of them at once).
  float* FindOrCreateForOverwrite(uint64_t key) { return RowPtr(FindOrCreateIndex(key, false)); }
  // Sizes the index for `rows` rows, so that many inserts never rehash.
  void Reserve(uint64_t rows);
  // The row of `key` or nullptr.
  float* Find(uint64_t key) const;

  // Deletes the row of `key` (false: there was none). Its storage and id go to a free list that
  // the next created row reuses (NativeStore::EraseRows says when that is safe).
  bool Erase(uint64_t key);

  // Writes the initial weights of `key` into w[0..dim).
  void InitialWeights(uint64_t key, float* w) const;

  // Floats per row: dim weights then the optimizer state.
  size_t row_floats() const { return row_floats_; }
  // Calls fn(key, row) for every row, in row-creation order.
  template <typename Fn>
  void ForEachRow(Fn&& fn) const {
    for (const Slot& s : slots_) {
      if (s.row != kEmpty) fn(s.key, static_cast<const float*>(RowPtr(s.row)));
    }
  }

 private:
  struct Slot {
    uint64_t key;
    uint32_t row;  // kEmpty when unused
  };
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  static constexpr size_t kRowsPerBlock = 1 << 14;

  size_t SlotOf(uint64_t key) const { return (Hash(key)) & mask_; }
  static uint64_t Hash(uint64_t key);
  void Prefetch(uint64_t key) const { __builtin_prefetch(&slots_[SlotOf(key)]); }
  // Second stage: once the slot is (likely) cached, prefetch the row it points to (first two
  // cache lines: the weights the optimizer reads first). A miss on the home slot is skipped.
  void PrefetchRow(uint64_t key) const {
    const Slot& s = slots_[SlotOf(key)];
    if (s.row == kEmpty || s.key != key) return;
    const float* r = RowPtr(s.row);
    __builtin_prefetch(r);
    if (row_floats_ > 16) __builtin_prefetch(r + 16);
    __builtin_prefetch(HistoryPtr(s.row), 1);  // the Updater records the update there
  }
  float* RowPtr(uint32_t row) const {
    return blocks_[row / kRowsPerBlock].get() + size_t{row % kRowsPerBlock} * row_floats_;
  }
  // The kRowHistory update versions of row `row`, newest first (0: none).
  uint64_t* HistoryPtr(uint32_t row) const {
    return history_[row / kRowsPerBlock].get() + size_t{row % kRowsPerBlock} * kRowHistory;
  }
  uint32_t NewRow(uint64_t key, bool init = true);
  uint32_t FindOrCreateIndex(uint64_t key, bool init = true);
  uint32_t FindIndex(uint64_t key) const;  // kEmpty when missing
  void Grow();

  const uint32_t table_id_;
  const int dim_;
  const size_t row_floats_;  // dim + state floats
  const config::InitConfig init_;
  const StateLayout state_;
  // Rows, history and index are randomly accessed over large ranges: huge pages (huge_pages.h).
  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  size_t mask_ = 0;
  uint64_t num_rows_ = 0;   // live rows
  uint64_t next_row_ = 0;   // ids handed out (live + free)
  std::vector<uint32_t> free_rows_;  // ids of erased rows, reused first
  std::vector<std::unique_ptr<float[], HugeDeleter>> blocks_;
  std::vector<std::unique_ptr<uint64_t[], HugeDeleter>> history_;  // per block: kRowHistory per row
};

}  // namespace osprey::server
