// Store: where a server keeps the parameters of the shards it owns. Storage only: the optimizer
// step, staleness and every other policy live above it (Updater, TableShard), so a backend
// implements rows, chunks, their opaque optimizer state and their update history, nothing else.
//
// Sparse tables map u64 keys to rows. A row's record is `dim` weights followed by the optimizer
// state, an opaque run of floats whose size and initial value the spec's StateLayout gives (the
// Updater fills it). A row is created on first touch: weights from a deterministic initializer of
// (init.seed, table id, key), so the same key gets the same initial row on any server; state from
// StateLayout::init. Each row also keeps its update history: the table versions of its last
// kRowHistory updates, newest first (0: none), written by the Updater, not checkpointed.
// Dense tables are flat float vectors cut into chunks of chunk_floats; a store holds only the
// chunks its server owns (the server validates ownership before calling).
//
// Row access is by blocks: VisitRows hands the caller (the Updater) the rows of a batch of keys a
// block at a time (pointers to each row's record and history); with RowAccess::kUpdate the caller
// changes them in place and the store then writes the block back -- a no-op for NativeStore, a
// pipelined write for a store whose rows live elsewhere (a Redis store's hot-row cache, #11) --
// and that write can fail. Sync(table) ends a merge window: a store that defers writes makes every
// row written since the last Sync durable before returning (write_through), or schedules them
// (write_back); its error fails the window's apply (TableShard: what the pushers then see).
//
// Implementations: NativeStore (in memory, native_store.h); a Redis-backed one comes with its
// issue. The server validates every request before calling a Store, so Store methods treat bad
// table ids / sizes as programmer errors and return Internal for them.
//
// Thread-safety: a Store is called from one thread at a time (under the server's work lock); the
// pointers a block hands out are valid only during the callback that receives them.
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

namespace osprey::server {

// Versions of update history kept per sparse row.
constexpr int kRowHistory = 4;
// Rows per RowBlock: large enough that a virtual call and a callback per block cost nothing,
// small enough that a block's rows are still in cache when the caller updates them.
constexpr size_t kRowBlockRows = 64;

// The optimizer state's shape, opaque to the store: floats(width) state floats follow a record's
// `width` weights (a sparse row: width = dim; a dense chunk: its length) and init writes their
// initial values. Both are pure and thread-safe.
struct StateLayout {
  std::function<size_t(size_t width)> floats;
  std::function<void(float* state, size_t width)> init;
};

struct StoreTableSpec {
  uint32_t id = 0;
  config::TableConfig config;  // type, dim, size, chunk_floats, init
  StateLayout state;           // required (Updater::state_layout())
  // Dense tables: the chunk ids this server owns (others are never asked for).
  std::vector<uint64_t> owned_chunks;
};

// A block of sparse rows handed out by VisitRows / VisitRowsById: rows [begin, begin + n) of the
// caller's keys (or ids), in that order (a key given twice appears twice, the same pointers).
struct RowBlock {
  size_t begin = 0;
  size_t n = 0;
  // rows[i]: the record (dim weights, then the state); history[i]: kRowHistory versions, newest
  // first. Both nullptr for a row that does not exist (RowAccess::kRead only).
  float* const* rows = nullptr;
  uint64_t* const* history = nullptr;
};
using RowBlockFn = std::function<Status(const RowBlock& block)>;

enum class RowAccess {
  kRead,          // existing rows only; missing ones are null; must not be written
  kReadOrCreate,  // missing rows are created; must not be written
  kUpdate,        // missing rows are created; the callback may write; written back after it
};

// The owned dense chunks of one VisitChunks call, all at once: weights[i] (floats[i] floats) and
// state[i] (StateLayout::floats(floats[i]) floats) of chunks[i]. The callback may write both; the
// store writes them back after it.
struct ChunkBlock {
  size_t n = 0;
  const uint64_t* chunks = nullptr;
  float* const* weights = nullptr;
  float* const* state = nullptr;
  const size_t* floats = nullptr;
};
using ChunkBlockFn = std::function<Status(const ChunkBlock& block)>;

class Store {
 public:
  virtual ~Store() = default;

  // Internal when the id exists already or the spec has no StateLayout.
  virtual Status CreateTable(const StoreTableSpec& spec) = 0;

  // Writes the `dim` weights of each key's row to out[i*dim], creating missing rows.
  virtual Status PullRows(uint32_t table, const uint64_t* keys, size_t n, float* out) = 0;
  // Calls `fn` for consecutive blocks (at most kRowBlockRows rows each) covering keys[0..n) in
  // order, with the access asked for (see RowAccess); stops at the first error of `fn` or of a
  // block's write-back and returns it (blocks before it stay written).
  virtual Status VisitRows(uint32_t table, const uint64_t* keys, size_t n, RowAccess access,
                           const RowBlockFn& fn) = 0;

  // Deletes the rows of keys[0..n) of sparse `table` (feature eviction, server/admission/); keys
  // without a row are skipped. *erased (when not null): how many rows were deleted. A later touch
  // of the key creates its row afresh from the initializer. Optional: Unimplemented by default
  // (a table with eviction is then refused at start).
  virtual Status EraseRows(uint32_t table, const uint64_t* keys, size_t n, size_t* erased) {
    return Unimplemented("this store cannot delete rows (eviction)");
  }

  // Sparse row ids (optional, has_row_ids): a row's id is a small integer fixed when the row is
  // created (NativeStore: ids are dense from 0, and a row never moves while the store lives; it
  // dies only by EraseRows, after which its id may be handed to a new row: a caller must not hold
  // ids across EraseRows of the table). A caller that holds no id of the table any more says so
  // with ReleaseRowIds: RedisStore keeps the rows it handed ids for in its cache until then (its
  // cache evicts rows, and an evicted row's id goes to another key). Merge
  // windows resolve each pushed key to its id once and apply by id (RowMergeBuffer), saving the
  // second hash lookup and applying in storage order. A store without ids (its windows merge by
  // key: MergeBuffer) returns Unimplemented from both calls.
  virtual bool has_row_ids(uint32_t table) const { return false; }
  // ids[i] = the id of keys[i]'s row, creating missing rows.
  virtual Status FindOrCreateRowIds(uint32_t table, const uint64_t* keys, size_t n,
                                    uint32_t* ids) {
    return Unimplemented("this store has no sparse row ids");
  }
  // ids[i] = the id of keys[i]'s row, kNoRowId where there is none; creates nothing. May run on
  // several threads at once where concurrent_row_visits.
  static constexpr uint32_t kNoRowId = 0xFFFFFFFFu;
  virtual Status FindRowIds(uint32_t table, const uint64_t* keys, size_t n, uint32_t* ids) const {
    return Unimplemented("this store has no sparse row ids");
  }
  // VisitRows by row id (each an id this store handed out; Internal otherwise); ids in
  // increasing order are visited in storage order. Access is always kUpdate.
  virtual Status VisitRowsById(uint32_t table, const uint32_t* ids, size_t n,
                               const RowBlockFn& fn) {
    return Unimplemented("this store has no sparse row ids");
  }
  // Whether VisitRowsById calls on disjoint ids of `table`, and VisitRows calls with
  // RowAccess::kRead, may run on several threads at once (nothing else uses the store
  // meanwhile): the apply pool spreads a window's apply and a large pull's reads then.
  virtual bool concurrent_row_visits(uint32_t table) const { return false; }
  // No id of `table` handed out so far is held any more (TableShard: every merge window is
  // applied, failed or rewound). No-op by default.
  virtual void ReleaseRowIds(uint32_t table) {}

  // Ends a merge window's writes to `table` (see the file comment). NativeStore: OK at once.
  virtual Status Sync(uint32_t table) { return Status::OK(); }
  // Writes now whatever the store holds unwritten in every table (a write-back store's dirty
  // rows); a no-op for a store that holds nothing unwritten. The server calls it at exit, before
  // its final rows digest.
  virtual Status FlushAll() { return Status::OK(); }
  // Whether a push may be acknowledged only once its window is applied and synced (kOnApply in
  // table_shard.h: a write_through store) rather than once merged (the default).
  virtual bool acks_after_apply() const { return false; }
  // Persisted push marks (server/push_dedup.h, issue 12): a store that makes the dedup marks of
  // the pushes a window applied durable with the window's rows (the Redis store, write_through),
  // so a replacement knows which re-sent pushes were applied. StagePushes: the pushes of the window
  // the next Sync(table) ends (incarnation 0: only counted); LoadPushMarks: what earlier
  // incarnations wrote: per (table, worker) a bound first (ids <= it applied), then ids applied.
  struct PushMark {
    uint32_t table = 0;
    int worker = 0;
    uint64_t incarnation = 0;  // the worker's (0: not deduplicated, only counted)
    uint64_t request_id = 0;   // LoadPushMarks: an id applied, or the bound (above)
  };
  virtual bool persists_push_marks() const { return false; }
  virtual void StagePushes(uint32_t table, const PushMark* marks, size_t n) {}
  virtual Status LoadPushMarks(std::vector<PushMark>* marks, uint64_t* applied) const {
    marks->clear();
    *applied = 0;
    return Status::OK();
  }
  // Rows and chunks changed but not yet durable (a write_back Redis store's dirty rows: what a
  // crash now would lose). Thread-safe. NativeStore: 0 (it keeps nothing elsewhere).
  virtual uint64_t unflushed_rows() const { return 0; }
  // A store that applies the optimizer step itself, atomically on its side (the Redis store with
  // merge: redis): true when ApplyMergedRows takes `table`'s merged windows; TableShard then hands
  // it the window's merged gradients instead of visiting the rows with its Updater. Default: no.
  virtual bool applies_merged(uint32_t table) const { return false; }
  // One optimizer step per key (distinct keys), gradient gp[i] (dim floats) times grad_scale, lr
  // times lr_scale; `version` (> 0) becomes the rows' latest update; missing rows are created.
  virtual Status ApplyMergedRows(uint32_t table, const uint64_t* keys, size_t n,
                                 const float* const* gp, float grad_scale, float lr_scale,
                                 uint64_t version) {
    return Unimplemented("this store does not apply merged gradients itself");
  }

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
  // Elastic servers (server/migration/): from now on this store owns exactly the chunks `owned`
  // of dense `table`. Chunks it owned before and still owns keep their weights and state; new
  // ones start uninitialized (ImportRecord or InitChunks fills them); the others are dropped.
  // Optional: Unimplemented by default (a scale step is then refused by the server).
  virtual Status SetOwnedChunks(uint32_t table, std::vector<uint64_t> owned) {
    return Unimplemented("this store cannot change its dense chunks (osprey scale)");
  }
  // Hands `fn` the owned chunks[0..n) to update in place (ChunkBlock), then writes them back.
  virtual Status VisitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                             const ChunkBlockFn& fn) = 0;
  // Sets chunk values unless the chunk was already initialized (first writer wins), so every
  // worker may send the same initial values without coordination.
  virtual Status InitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                            const float* values) = 0;

  // Checkpoints. A record is a sparse row or an owned dense chunk: its weights followed by its
  // optimizer state, `RecordFloats` floats in all.
  using RecordVisitor = std::function<Status(uint64_t key, const float* data, size_t floats)>;
  // Calls `visit` once per record of `table` (sparse: rows in storage order; dense: owned chunks
  // that were initialized); stops at the first error and returns it.
  virtual Status ExportRecords(uint32_t table, const RecordVisitor& visit) const = 0;
  // The keys ExportRecords would visit, without their records (a scale step picks the moved rows
  // from them). Default: through ExportRecords; a store whose rows live elsewhere (Redis) reads
  // only the keys. The same rule for `visit`: it must not call back into the store.
  virtual Status ExportKeys(uint32_t table, const std::function<Status(uint64_t key)>& visit) const {
    return ExportRecords(table, [&](uint64_t key, const float*, size_t) { return visit(key); });
  }
  // A scale step's sparse rows, for a store whose rows live outside the server (Redis): hands
  // every row of sparse `table` that `owner(key)` places on a rank other than `self` to that
  // rank where the rows lie, with no copy through the servers; moved[r] (resized to `ranks`):
  // the rows rank r got; *kept: the rows that stayed (num_rows after). The new owner then
  // calls AdoptRows.
  // Unimplemented by default: the rows are sent (OP_MIGRATE_ROWS) and imported (ImportRecord).
  virtual bool reowns_rows() const { return false; }
  virtual Status ReownRows(uint32_t table, int self, int ranks,
                           const std::function<int(uint64_t key)>& owner,
                           std::vector<uint64_t>* moved, uint64_t* kept) {
    return Unimplemented("this store cannot hand rows to another server in place");
  }
  // The new owner's side: rows were handed to it in place (num_rows counts them afterwards).
  virtual Status AdoptRows(uint32_t table) {
    return Unimplemented("this store cannot take rows handed to it in place");
  }
  // Overwrites (creating if needed) the record `key` with `floats` floats laid out as exported.
  // InvalidArgument when `floats` is not RecordFloats(table, key) or the chunk is not owned.
  virtual Status ImportRecord(uint32_t table, uint64_t key, const float* data, size_t floats) = 0;
  // A hint before importing about `n` records into `table` (a restore): size the index once.
  virtual void ReserveRecords(uint32_t table, uint64_t n) {}
  virtual size_t RecordFloats(uint32_t table, uint64_t key) const = 0;

  // Number of floats of dense chunk `chunk` of `table` (the last chunk may be short).
  virtual size_t ChunkFloats(uint32_t table, uint64_t chunk) const = 0;
  virtual uint64_t num_rows(uint32_t table) const = 0;
};

// Factory: kind "native" (redis comes with its issue).
StatusOr<std::unique_ptr<Store>> MakeStore(const std::string& kind);

}  // namespace osprey::server
