// RedisStore's part of a scale step (osprey scale; server/migration/server_reshard.cc): sparse
// rows are handed to their new owner in Redis (ReownRows, redis_store_reown.cc); EraseRows
// deletes rows from this rank's buckets (feature eviction; and a store asked to send its rows
// instead, where the new owner imported and wrote them first); a server's dense chunks change
// (SetOwnedChunks): their records travel like the native store's (OP_MIGRATE_ROWS), the new
// owner imports them and writes them under its own fence before the step commits.
#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "server/redis/redis_store.h"
#include "server/redis/redis_store_table.h"

namespace osprey::server {

using redis::Command;
using redis::Reply;

Status RedisStore::EraseRows(uint32_t table, const uint64_t* keys, size_t n, size_t* erased) {
  if (erased != nullptr) *erased = 0;
  if (n == 0) return Status::OK();
  // No flush in progress or started meanwhile: it could write an erased row back.
  MutexLock flushing(&flush_mu_);
  std::vector<std::vector<uint64_t>> by_bucket(redis_store::kBuckets);
  {
    MutexLock l(&mu_);
    Table* t = sparse(table);
    if (t == nullptr) return Internal("redis store: EraseRows on table " + std::to_string(table) + ", not a sparse table");
    t->cache->Erase(keys, n);
    for (size_t i = 0; i < n; ++i) by_bucket[redis_store::BucketOf(keys[i])].push_back(keys[i]);
  }
  const std::string rank = std::to_string(layout_->rank());
  const std::string inc = std::to_string(incarnation_);
  std::vector<Command> cmds;
  for (uint32_t b = 0; b < redis_store::kBuckets; ++b) {
    const std::string tag = layout_->BucketTag(table, b);
    for (size_t from = 0; from < by_bucket[b].size(); from += redis_store::kRowsPerCall) {
      Command c{{"FCALL", "osprey_del", "2", tag + ":fence", layout_->Rows(table, b), rank, inc}, 3};
      const size_t to = std::min(by_bucket[b].size(), from + redis_store::kRowsPerCall);
      for (size_t i = from; i < to; ++i) c.args.push_back(redis_store::Layout::Field(by_bucket[b][i]));
      cmds.push_back(std::move(c));
    }
  }
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute(cmds, &r));
  uint64_t deleted = 0;
  for (const Reply& x : r) {
    if (x.is_error()) return RedisReplyError(x, "deleting the moved rows of table " + std::to_string(table));
    if (x.type == Reply::Type::kInteger) deleted += static_cast<uint64_t>(x.integer);
  }
  MutexLock l(&mu_);
  Table* t = sparse(table);
  t->redis_rows -= std::min(t->redis_rows, deleted);
  if (erased != nullptr) *erased = static_cast<size_t>(deleted);
  return Status::OK();
}

Status RedisStore::SetOwnedChunks(uint32_t table, std::vector<uint64_t> owned) {
  MutexLock flushing(&flush_mu_);  // no flush of a chunk given up
  std::vector<std::string> fences;
  {
    MutexLock l(&mu_);
    Table* t = any(table);
    if (t == nullptr || t->is_sparse) {
      return Internal("redis store: SetOwnedChunks on table " + std::to_string(table) + ", not a dense table");
    }
    const std::unordered_set<uint64_t> keep(owned.begin(), owned.end());
    // A chunk given up is never written here again: its new owner writes the copy it is sent.
    for (auto it = t->dirty_chunks.begin(); it != t->dirty_chunks.end();) {
      it = keep.count(*it) ? std::next(it) : t->dirty_chunks.erase(it);
    }
    for (auto it = t->initialized.begin(); it != t->initialized.end();) {
      it = keep.count(*it) ? std::next(it) : t->initialized.erase(it);
    }
    for (uint64_t c : owned) fences.push_back(layout_->ChunkTag(table, c) + ":fence");
    OSPREY_RETURN_IF_ERROR(dense_.SetOwnedChunks(table, std::move(owned)));
  }
  return Claim(fences);  // this incarnation writes the chunks it gained from now on
}

}  // namespace osprey::server
