// RedisStore: the Store whose rows live in Redis (one node or a Redis Cluster); store.type: redis.
//
// The osprey-server stays the single writer and the compute engine of its shards: the Updater
// changes rows in the store's in-memory row cache (RowCache), and the store writes them to Redis
// (row_layout.h) through the fenced function osprey_put (redis_functions.h):
//   write_through: Sync(table) -- the end of a merge window -- writes every dirty row of the table
//     in one pipelined batch (one FCALL per bucket) and returns once Redis acknowledged them;
//     acks_after_apply() is true, so a push is acknowledged only after its rows are in Redis.
//   write_back: a flusher thread (its own connection) writes dirty rows every flush_interval_ms;
//     a crash loses at most the rows not yet flushed (unflushed_rows(), logged at the end).
// Misses are read with one pipelined batch (an HMGET per bucket) per VisitRows / PullRows call; a
// row absent from
// Redis is the deterministic initial row (SparseTable::InitialWeights), so a pull never writes.
// The cache keeps at most cache_rows clean rows (LRU or LFU); dirty rows stay until written.
//
// Fencing: TakeOver(rank) INCRs the rank's incarnation and claims every bucket (and owned chunk)
// of the tables created after it; an older incarnation's writes are then refused by Redis
// (FailedPrecondition "FENCED ..."), so a replaced server can never overwrite its successor.
//
// Dense tables are kept whole in memory (a NativeStore) and written chunk by chunk as blobs.
// Checkpoint export reads a table's rows back with one HGETALL per bucket.
//
// Thread-safety: Store calls come from one thread at a time (store.h); mu_ guards what the
// flusher thread shares with them.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/config/store_config.h"
#include "common/mutex.h"
#include "common/redis/redis_client.h"
#include "common/thread_annotations.h"
#include "server/native_store.h"
#include "server/redis/row_cache.h"
#include "server/redis/row_layout.h"
#include "server/store.h"

namespace osprey::server {

class SparseTable;

class RedisStore : public Store {
 public:
  // Connects (two connections with write_back) and loads the function library on every master.
  // Errors name the endpoint (Unavailable) or the refused AUTH (PermissionDenied).
  static StatusOr<std::unique_ptr<RedisStore>> Connect(const config::RedisStoreConfig& config);
  ~RedisStore() override;

  // Becomes the owner of rank `rank`'s rows: a new incarnation. Call before CreateTable.
  Status TakeOver(int rank);
  uint64_t incarnation() const { return incarnation_; }

  Status CreateTable(const StoreTableSpec& spec) override;
  Status PullRows(uint32_t table, const uint64_t* keys, size_t n, float* out) override;
  Status VisitRows(uint32_t table, const uint64_t* keys, size_t n, RowAccess access,
                   const RowBlockFn& fn) override;
  // Row ids (sparse tables, merge: server): a row's place in the hot-row cache. While ids are out
  // (FindOrCreateRowIds .. ReleaseRowIds) the table's cache evicts nothing, so a held id never
  // names another key's row; ReleaseRowIds evicts what is over capacity.
  bool has_row_ids(uint32_t table) const override;
  Status FindOrCreateRowIds(uint32_t table, const uint64_t* keys, size_t n, uint32_t* ids) override;
  Status VisitRowsById(uint32_t table, const uint32_t* ids, size_t n, const RowBlockFn& fn) override;
  void ReleaseRowIds(uint32_t table) override;
  Status Sync(uint32_t table) override;
  // merge: redis (redis_merge.cc): the optimizer step runs in Redis (osprey_apply).
  bool applies_merged(uint32_t table) const override;
  Status ApplyMergedRows(uint32_t table, const uint64_t* keys, size_t n, const float* const* gp,
                         float grad_scale, float lr_scale, uint64_t version) override;
  bool acks_after_apply() const override {
    return config_.write_policy == config::WritePolicy::kWriteThrough;
  }
  // Push marks (push_marks.cc), write_through only: a Flush writes its table's staged marks and
  // applied-push count into {P}:pushes:r<rank> -- single node in the same MULTI/EXEC as the rows,
  // Redis Cluster (rows span slots) right after the rows were acknowledged. TakeOver loads them.
  bool persists_push_marks() const override {
    return config_.write_policy == config::WritePolicy::kWriteThrough;
  }
  void StagePushes(uint32_t table, const PushMark* marks, size_t n) override;
  Status LoadPushMarks(std::vector<PushMark>* marks, uint64_t* applied) const override;
  Status PullChunks(uint32_t table, const uint64_t* chunks, size_t n, float* out) override;
  bool PullChunksView(uint32_t table, const uint64_t* chunks, size_t n, Buffer* out) override;
  Status VisitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                     const ChunkBlockFn& fn) override;
  Status InitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                    const float* values) override;
  // A scale step (redis_store_reshard.cc): moved rows deleted from this rank's buckets (fenced),
  // dense chunks given up or gained (their fences claimed). EraseRows also serves eviction.
  Status EraseRows(uint32_t table, const uint64_t* keys, size_t n, size_t* erased) override;
  Status SetOwnedChunks(uint32_t table, std::vector<uint64_t> owned) override;
  Status ExportRecords(uint32_t table, const RecordVisitor& visit) const override;
  // Sparse: HKEYS per bucket plus the cached rows' keys (each once); dense: ExportRecords'.
  Status ExportKeys(uint32_t table, const std::function<Status(uint64_t key)>& visit) const override;
  // A scale step hands sparse rows over in Redis (redis_store_reown.cc): one node moves them
  // with the fenced function osprey_move (no row leaves Redis); a Redis Cluster (the two
  // buckets are in different slots) copies their blobs from bucket to bucket through this
  // server (osprey_take, HSET, then osprey_del) -- never through the new owner, never decoded.
  bool reowns_rows() const override { return true; }
  Status ReownRows(uint32_t table, int self, int ranks, const std::function<int(uint64_t key)>& owner,
                   std::vector<uint64_t>* moved, uint64_t* kept) override;
  Status AdoptRows(uint32_t table) override;
  Status ImportRecord(uint32_t table, uint64_t key, const float* data, size_t floats) override;
  size_t RecordFloats(uint32_t table, uint64_t key) const override;
  size_t ChunkFloats(uint32_t table, uint64_t chunk) const override;
  uint64_t num_rows(uint32_t table) const override;
  // The most clean rows sparse `table`'s hot-row cache keeps (cache_rows, or what cache_bytes
  // holds), and the rows it holds now (dirty ones included); 0 for other tables.
  uint64_t cache_capacity(uint32_t table) const;
  uint64_t cached_rows(uint32_t table) const;

  // Writes every dirty row and chunk of every table now (write_back: what Stop does).
  Status FlushAll() override;
  // Dirty rows and chunks not yet in Redis (write_back: what a crash now would lose).
  uint64_t unflushed_rows() const override;
  // Rows and chunks written to Redis since Connect (Sync, the flusher, FlushAll).
  uint64_t flushed_rows() const { return flushed_rows_.load(std::memory_order_relaxed); }
  // Stops the flusher after a last flush; idempotent (the destructor calls it).
  void Stop();

 private:
  struct Table;
  RedisStore(const config::RedisStoreConfig& config, std::unique_ptr<redis::RedisClient> client,
             std::unique_ptr<redis::RedisClient> flush_client);
  Table* sparse(uint32_t table) const;
  Table* any(uint32_t table) const;
  // Reads the rows of keys[0..n) missing from the cache (one pipelined batch); creates the
  // absent ones when `create`. On success t->resolved[i] is keys[i]'s row (null: not in Redis
  // and not created).
  Status Fetch(Table* t, const uint64_t* keys, size_t n, bool create) REQUIRES(mu_);
  // Hands the m rows found[0..m) (a null row: absent; m <= kRowBlockRows) to `fn` as the block
  // starting at `begin`; marks them dirty after it when `update`.
  Status VisitBlock(Table* t, redis_store::RowCache::Row* const* found, size_t m, size_t begin,
                    bool update, const RowBlockFn& fn) REQUIRES(mu_);
  // Writes the dirty rows / chunks of `t` with `client`; `mu_` is held only to copy them.
  Status Flush(uint32_t table, redis::RedisClient* client) EXCLUDES(mu_, flush_mu_);
  Status FlushLocked(uint32_t table, redis::RedisClient* client) REQUIRES(flush_mu_) EXCLUDES(mu_);
  // Sends `rows` (moved from) with the marks of `staged`; *marked: the marks' own outcome.
  Status ExecuteWithMarks(std::vector<redis::Command>* rows, const std::vector<PushMark>& staged,
                          redis::RedisClient* client, std::vector<redis::Reply>* replies,
                          Status* marked) REQUIRES(flush_mu_);
  Status ReadPushMarks();
  Status CheckMeta(const StoreTableSpec& spec);
  Status Claim(const std::vector<std::string>& fences);
  void FlusherLoop();

  const config::RedisStoreConfig config_;
  std::unique_ptr<redis::RedisClient> client_;
  std::unique_ptr<redis::RedisClient> flush_client_;  // write_back's flusher; null otherwise
  std::unique_ptr<redis_store::Layout> layout_;       // set by TakeOver
  uint64_t incarnation_ = 0;
  NativeStore dense_;  // dense tables, whole (written back chunk by chunk)

  mutable Mutex mu_;
  // A leaf lock guarding only the vector (CreateTable adds to it; any() and the flush loops read
  // it from the request thread and the flusher); the tables' contents are under mu_.
  mutable Mutex tables_mu_ ACQUIRED_AFTER(mu_);
  std::vector<std::unique_ptr<Table>> tables_ GUARDED_BY(tables_mu_);
  Mutex flush_mu_;  // one Flush at a time (the flusher's and Sync's)
  Mutex stop_mu_;
  CondVar stop_cv_;
  bool stopping_ GUARDED_BY(stop_mu_) = false;
  std::thread flusher_;
  std::atomic<uint64_t> flushed_rows_{0};
  uint64_t marks_seq_ GUARDED_BY(flush_mu_) = 0;  // the last push-marks write's sequence number
  std::vector<PushMark> loaded_marks_;             // what TakeOver read (LoadPushMarks)
  uint64_t loaded_applied_ = 0;
};

// Factory: "native" or the Redis store of `config` (store.type).
StatusOr<std::unique_ptr<Store>> MakeConfiguredStore(const config::StoreConfig& config);

}  // namespace osprey::server
