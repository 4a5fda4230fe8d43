// RedisStore: sparse row ids (Store::has_row_ids), a row's place in the table's hot-row cache, so
// merge windows merge and apply by id as on the native store. Held ids pin the cache: nothing is
// evicted from FindOrCreateRowIds until ReleaseRowIds (redis_store.h).
#include <algorithm>
#include <string>

#include "server/redis/redis_store.h"
#include "server/redis/redis_store_table.h"

namespace osprey::server {

using redis_store::RowCache;

bool RedisStore::has_row_ids(uint32_t table) const {
  // merge: redis applies by key in Redis (ApplyMergedRows).
  if (config_.merge == config::MergeSide::kRedis) return false;
  MutexLock l(&mu_);
  return sparse(table) != nullptr;
}

Status RedisStore::FindOrCreateRowIds(uint32_t table, const uint64_t* keys, size_t n,
                                      uint32_t* ids) {
  MutexLock l(&mu_);
  Table* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  t->ids_out = true;  // before Fetch: nothing evicts the rows it resolves
  OSPREY_RETURN_IF_ERROR(Fetch(t, keys, n, /*create=*/true));
  for (size_t i = 0; i < n; ++i) ids[i] = t->resolved[i]->id;
  return Status::OK();
}

Status RedisStore::VisitRowsById(uint32_t table, const uint32_t* ids, size_t n,
                                 const RowBlockFn& fn) {
  MutexLock l(&mu_);
  Table* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  // A block at a time, so its rows are still in cache when `fn` runs.
  Status s;
  for (size_t begin = 0; begin < n && s.ok(); begin += kRowBlockRows) {
    const size_t m = std::min(kRowBlockRows, n - begin);
    t->resolved.resize(m);
    for (size_t i = 0; i < m; ++i) {
      t->resolved[i] = t->cache->ById(ids[begin + i]);
      if (t->resolved[i] == nullptr) {
        return Internal("redis store: row id " + std::to_string(ids[begin + i]) + " of table " +
                        std::to_string(table) + " names no cached row (an id held past ReleaseRowIds?)");
      }
    }
    s = VisitBlock(t, t->resolved.data(), m, begin, /*update=*/true, fn);
  }
  return s;
}

void RedisStore::ReleaseRowIds(uint32_t table) {
  MutexLock l(&mu_);
  Table* t = sparse(table);
  if (t == nullptr || !t->ids_out) return;
  t->ids_out = false;
  t->MaybeEvict();
}

}  // namespace osprey::server
