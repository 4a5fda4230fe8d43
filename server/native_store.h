// NativeStore: the in-memory Store.
//
// Sparse rows live in fixed-size blocks of an arena (rows never move once created), indexed by an
// open-addressing hash table with linear probing (16-byte slots: key + row index) that doubles at
// 70% load. A row is `dim` weights followed by the optimizer's state. Batch operations prefetch
// the hash slots of keys a few positions ahead, since at millions of keys per request the lookup
// is bound by cache misses, not arithmetic. The owned chunks of a dense table share one
// copy-on-write weights block (PullChunksView).
//
// Thread-safety: none; see Store.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "server/store.h"

namespace osprey::server {

class SparseTable;
class DenseTable;

class NativeStore : public Store {
 public:
  NativeStore();
  ~NativeStore() override;

  Status CreateTable(const StoreTableSpec& spec) override;
  Status PullRows(uint32_t table, const uint64_t* keys, size_t n, float* out) override;
  Status VisitRows(uint32_t table, const uint64_t* keys, size_t n, RowAccess access,
                   const RowBlockFn& fn) override;
  bool has_row_ids(uint32_t table) const override { return sparse(table) != nullptr; }
  Status FindOrCreateRowIds(uint32_t table, const uint64_t* keys, size_t n,
                            uint32_t* ids) override;
  Status FindRowIds(uint32_t table, const uint64_t* keys, size_t n, uint32_t* ids) const override;
  Status VisitRowsById(uint32_t table, const uint32_t* ids, size_t n,
                       const RowBlockFn& fn) override;
  // By id, and with kRead, nothing is created or moved: visits only read the row index.
  bool concurrent_row_visits(uint32_t table) const override { return has_row_ids(table); }
  // Erased rows' ids and storage are reused by the rows created next (a free list), so an id
  // held across EraseRows may name another key's row: TableShard merges a table with eviction
  // by key, never by id (table_shard.cc), and every other caller holds ids only within a call.
  Status EraseRows(uint32_t table, const uint64_t* keys, size_t n, size_t* erased) override;
  Status SetOwnedChunks(uint32_t table, std::vector<uint64_t> owned) override;
  Status PullChunks(uint32_t table, const uint64_t* chunks, size_t n, float* out) override;
  // True when the chunks are owned, distinct and consecutive in chunk-id order (a client's whole
  // route to this server is): dense weights are stored that way, copy-on-write.
  bool PullChunksView(uint32_t table, const uint64_t* chunks, size_t n, Buffer* out) override;
  Status VisitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                     const ChunkBlockFn& fn) override;
  Status InitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                    const float* values) override;
  Status ExportRecords(uint32_t table, const RecordVisitor& visit) const override;
  Status ImportRecord(uint32_t table, uint64_t key, const float* data, size_t floats) override;
  void ReserveRecords(uint32_t table, uint64_t n) override;
  size_t RecordFloats(uint32_t table, uint64_t key) const override;
  size_t ChunkFloats(uint32_t table, uint64_t chunk) const override;
  uint64_t num_rows(uint32_t table) const override;

 private:
  SparseTable* sparse(uint32_t table) const;
  DenseTable* dense(uint32_t table) const;

  std::vector<std::unique_ptr<SparseTable>> sparse_;  // by table id; null for dense tables
  std::vector<std::unique_ptr<DenseTable>> dense_;    // by table id; null for sparse tables
};

}  // namespace osprey::server
