// Store: where a server keeps the parameters (and optimizer state) of the shards it owns.
//
// Sparse tables map u64 keys to rows of `dim` floats; a row is created on first touch by a
// deterministic initializer of (init.seed, table id, key), so the same key gets the same initial
// row on any server. Dense tables are flat float vectors cut into chunks of chunk_floats; a store
// holds only the chunks its server owns (the server validates ownership before calling).
//
// Implementations: NativeStore (in memory, native_store.h); a Redis-backed one comes with its
// issue. The server validates every request before calling a Store, so Store methods treat bad
// table ids / sizes as programmer errors and return Internal for them.
//
// Thread-safety: a Store is called from one thread at a time (the server's request thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/config/table_config.h"
#include "common/status.h"
#include "server/optim/optimizer.h"

namespace osprey::server {

// What one optimizer step on sparse rows (Store::PushRows) applies besides the gradients.
struct RowUpdate {
  RowUpdate(const ApplyOptions& o = ApplyOptions{}) : options(o) {}  // NOLINT: implicit on purpose
  ApplyOptions options;                        // every row, unless row_options is set
  const ApplyOptions* row_options = nullptr;   // n entries, one per key (per-row staleness policies)
  // The table version this step creates (TableShard::version() after it). When > 0 it is
  // recorded as the rows' latest update, which RowStaleness counts; 0 records nothing.
  uint64_t version = 0;
};

// Rows of update history kept per sparse row (see Store::RowStaleness).
constexpr int kRowHistory = 4;

struct StoreTableSpec {
  uint32_t id = 0;
  config::TableConfig config;
  // Dense tables: the chunk ids this server owns (others are never asked for).
  std::vector<uint64_t> owned_chunks;
};

class Store {
 public:
  virtual ~Store() = default;

  virtual Status CreateTable(const StoreTableSpec& spec) = 0;

  // Writes the `dim` weights of each key's row to out[i*dim], creating missing rows.
  virtual Status PullRows(uint32_t table, const uint64_t* keys, size_t n, float* out) = 0;
  // Applies one optimizer step per key with grads[i*dim]; missing rows are created first.
  // Duplicate keys in one call are applied in order (one step each); callers that want one
  // merged step per key merge first.
  virtual Status PushRows(uint32_t table, const uint64_t* keys, size_t n, const float* grads,
                          const RowUpdate& update) = 0;
  // The same with key i's gradient at grads[i] (dim floats each, anywhere in memory): a merge
  // window's rows, most of which point into the pushes they came from.
  virtual Status PushRows(uint32_t table, const uint64_t* keys, size_t n,
                          const float* const* grads, const RowUpdate& update) = 0;
  // Sparse row ids (optional, has_row_ids): a row's id is a small integer fixed when the row is
  // created (ids are dense from 0, and a row never moves or dies while the store lives). Merge
  // windows resolve each pushed key to its id once and apply by id (RowMergeBuffer), saving the
  // second hash lookup and applying in storage order. Stores without ids return Unimplemented.
  virtual bool has_row_ids(uint32_t table) const { return false; }
  // ids[i] = the id of keys[i]'s row, creating missing rows (as PushRows would).
  virtual Status FindOrCreateRowIds(uint32_t table, const uint64_t* keys, size_t n,
                                    uint32_t* ids) {
    return Unimplemented("this store has no sparse row ids");
  }
  // PushRows by id: one optimizer step per row ids[i] with gradient grads[i] (dim floats each).
  virtual Status PushRowsById(uint32_t table, const uint32_t* ids, size_t n,
                              const float* const* grads, const RowUpdate& update) {
    return Unimplemented("this store has no sparse row ids");
  }
  // Per-row staleness: out[i] = the number of PushRows calls with a version > `since` that
  // updated the row of keys[i]. Each row remembers the versions of its last kRowHistory updates
  // (not checkpointed: a restored row has no history), so the count is exact below
  // kRowHistory; when all remembered updates are newer than `since` the row was updated at
  // least kRowHistory times and out[i] = max(kRowHistory, cap) (the caller passes the table's
  // staleness, an upper bound). A row that does not exist yet gives 0. Creates nothing.
  virtual Status RowStaleness(uint32_t table, const uint64_t* keys, size_t n, uint64_t since,
                              uint64_t cap, uint64_t* out) const = 0;

  // Dense: `chunks` are chunk ids; values are the chunks' floats concatenated in that order.
  virtual Status PullChunks(uint32_t table, const uint64_t* chunks, size_t n, float* out) = 0;
  // Dense, without copying: when the store can, sets *out to a view of exactly the floats
  // PullChunks would write and returns true; else returns false and leaves *out alone (the
  // caller falls back to PullChunks). The view is an immutable snapshot: later pushes, inits and
  // imports never change the bytes it shows (the store writes a copy while a view is alive), so
  // it may be read on any thread, e.g. sent by the transport after the store moved on.
  virtual bool PullChunksView(uint32_t table, const uint64_t* chunks, size_t n, Buffer* out) {
    return false;
  }
  virtual Status PushChunks(uint32_t table, const uint64_t* chunks, size_t n, const float* grads,
                            const ApplyOptions& options) = 0;
  // The same with chunk i's gradient at grads[i] (the chunk's floats).
  virtual Status PushChunks(uint32_t table, const uint64_t* chunks, size_t n,
                            const float* const* grads, const ApplyOptions& options) = 0;
  // Sets chunk values unless the chunk was already initialized (first writer wins), so every
  // worker may send the same initial values without coordination.
  virtual Status InitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                            const float* values) = 0;

  // Checkpoints. A record is a sparse row or an owned dense chunk: its weights followed by its
  // optimizer state (the optimizer's layout), `RecordFloats` floats in all.
  using RecordVisitor = std::function<Status(uint64_t key, const float* data, size_t floats)>;
  // Calls `visit` once per record of `table` (sparse: rows in storage order; dense: owned chunks
  // that were initialized); stops at the first error and returns it.
  virtual Status ExportRecords(uint32_t table, const RecordVisitor& visit) const = 0;
  // Overwrites (creating if needed) the record `key` with `floats` floats laid out as exported.
  // InvalidArgument when `floats` is not RecordFloats(table, key) or the chunk is not owned.
  virtual Status ImportRecord(uint32_t table, uint64_t key, const float* data, size_t floats) = 0;
  virtual size_t RecordFloats(uint32_t table, uint64_t key) const = 0;

  // Number of floats of dense chunk `chunk` of `table` (the last chunk may be short).
  virtual size_t ChunkFloats(uint32_t table, uint64_t chunk) const = 0;
  virtual uint64_t num_rows(uint32_t table) const = 0;
};

// Factory: kind "native" (redis comes with its issue).
StatusOr<std::unique_ptr<Store>> MakeStore(const std::string& kind);

}  // namespace osprey::server
