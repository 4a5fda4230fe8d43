// RedisStore::Table: the store's per-table state (shared by redis_store*.cc only).
#pragma once

#include <memory>
#include <unordered_set>
#include <vector>

#include "server/redis/redis_store.h"
#include "server/sparse_table.h"

namespace osprey::server {

struct RedisStore::Table {
  uint32_t id = 0;
  bool is_sparse = true;
  size_t row_floats = 0;
  std::unique_ptr<SparseTable> initializer;  // only for InitialWeights
  StateLayout state;
  int dim = 0;
  // merge: redis: the optimizer's lr and eps (sgd or adagrad; config validation refused others).
  bool adagrad = false;
  float lr = 0, eps = 0;
  std::unique_ptr<redis_store::RowCache> cache;
  bool ids_out = false;  // row ids handed out and not released: evict nothing (redis_store.h)
  // Evicts clean rows over the cache's capacity, unless row ids are out.
  void MaybeEvict() {
    if (!ids_out) cache->MaybeEvict();
  }
  // Dense: chunks written since the last flush, and those given values (InitChunks / Redis).
  std::unordered_set<uint64_t> dirty_chunks;
  std::unordered_set<uint64_t> initialized;
  std::vector<PushMark> staged_pushes;  // write_through: the pushes the next Flush makes durable
  uint64_t redis_rows = 0;  // rows in Redis (HLEN at start + created since)
  // Fetch scratch, and its result: resolved[i] = the row of the i-th key (null: none and not
  // created), valid until the next Fetch.
  std::vector<uint64_t> miss;
  std::vector<redis_store::RowCache::Row*> resolved;
  std::vector<std::vector<uint64_t>> by_bucket;
  // VisitRows scratch.
  std::vector<float*> rows;
  std::vector<uint64_t*> history;
};

// A Redis error reply as a Status: FailedPrecondition for a fenced write, else Internal.
Status RedisReplyError(const redis::Reply& r, const std::string& what);

}  // namespace osprey::server
