// RedisStore: writing dirty rows and chunks to Redis (Sync, the write_back flusher, FlushAll).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "common/logging.h"
#include "server/redis/redis_store.h"
#include "server/redis/redis_store_table.h"

namespace osprey::server {

using redis::Command;
using redis::Reply;
using redis_store::RowCache;

void RedisStore::FlusherLoop() {
  const auto interval = std::chrono::milliseconds(config_.flush_interval_ms);
  while (true) {
    {
      MutexLock l(&stop_mu_);
      if (stop_cv_.WaitFor(&l, interval, [&]() REQUIRES(stop_mu_) { return stopping_; })) return;
    }
    size_t n;
    {
      MutexLock l(&tables_mu_);
      n = tables_.size();
    }
    for (size_t t = 0; t < n; ++t) {
      Status s = Flush(static_cast<uint32_t>(t), flush_client_.get());
      if (!s.ok()) OSPREY_LOG_WARN("redis store: write_back flush of table {}: {}", t, s.ToString());
    }
  }
}

Status RedisStore::Flush(uint32_t table, redis::RedisClient* client) {
  MutexLock flushing(&flush_mu_);
  return FlushLocked(table, client);
}

Status RedisStore::FlushLocked(uint32_t table, redis::RedisClient* client) {
  std::vector<Command> cmds;
  // Per command: the (key, generation) of its rows (sparse) or its chunk (dense).
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> what;
  const std::string rank = std::to_string(layout_->rank());
  const std::string inc = std::to_string(incarnation_);
  bool is_sparse;
  std::vector<PushMark> staged;
  {
    MutexLock l(&mu_);
    Table* t = any(table);
    if (t == nullptr) return Status::OK();
    is_sparse = t->is_sparse;
    staged.swap(t->staged_pushes);
    if (is_sparse) {
      std::vector<std::vector<std::pair<uint64_t, uint64_t>>> by_bucket(redis_store::kBuckets);
      for (const auto& kg : t->cache->TakeDirty()) by_bucket[redis_store::BucketOf(kg.first)].push_back(kg);
      for (uint32_t b = 0; b < redis_store::kBuckets; ++b) {
       // At most kRowsPerCall rows a call: the function unpacks its arguments onto Lua's stack.
       for (size_t from = 0; from < by_bucket[b].size(); from += redis_store::kRowsPerCall) {
        std::vector<std::pair<uint64_t, uint64_t>> piece(
            by_bucket[b].begin() + static_cast<std::ptrdiff_t>(from),
            by_bucket[b].begin() + static_cast<std::ptrdiff_t>(std::min(by_bucket[b].size(), from + redis_store::kRowsPerCall)));
        const std::string tag = layout_->BucketTag(table, b);
        // Formatted straight into the protocol buffer: no string per field or row blob.
        Command c;
        c.key_index = 3;
        const size_t k = piece.size();
        c.args = {"FCALL", "osprey_put", "2", tag + ":fence"};
        const std::string rows_key = layout_->Rows(table, b);
        const size_t row_bytes = t->row_floats * sizeof(float);
        c.resp.reserve(64 + 2 * tag.size() + k * (48 + redis_store::RowBlobBytes(t->row_floats)));
        redis::RespWriter w(&c.resp, 7 + 2 * k);
        for (const std::string& a : c.args) w.Arg(a);
        w.Arg(rows_key);
        w.Arg(rank);
        w.Arg(inc);
        for (const auto& kg : piece) {
          RowCache::Row* row = t->cache->Peek(kg.first);
          w.ArgU64(kg.first);
          w.Arg(reinterpret_cast<const char*>(row->record), row_bytes,
                reinterpret_cast<const char*>(row->history), kRowHistory * sizeof(uint64_t));
        }
        cmds.push_back(std::move(c));
        what.push_back(std::move(piece));
       }
      }
    } else {
      for (uint64_t chunk : t->dirty_chunks) {
        std::string blob;
        Status s = dense_.ExportRecords(table, [&](uint64_t c, const float* d, size_t f) {
          if (c == chunk) blob.assign(reinterpret_cast<const char*>(d), f * sizeof(float));
          return Status::OK();
        });
        if (!s.ok()) return s;
        const std::string tag = layout_->ChunkTag(table, chunk);
        cmds.push_back(Command{{"FCALL", "osprey_set", "2", tag + ":fence", tag, rank, inc,
                                std::move(blob)}, 3});
        what.push_back({{chunk, 0}});
      }
      t->dirty_chunks.clear();
    }
  }
  if (cmds.empty() && staged.empty()) return Status::OK();
  std::vector<Reply> r;
  Status marked;
  Status sent = ExecuteWithMarks(&cmds, staged, client, &r, &marked);
  MutexLock l(&mu_);
  Table* t = any(table);
  Status first;
  for (size_t i = 0; i < cmds.size(); ++i) {
    bool ok = sent.ok() && !r[i].is_error();
    if (ok) flushed_rows_.fetch_add(what[i].size(), std::memory_order_relaxed);
    if (!ok && first.ok()) first = sent.ok() ? RedisReplyError(r[i], "writing rows of table " + std::to_string(table)) : sent;
    for (const auto& [key, gen] : what[i]) {
      if (!is_sparse) {
        if (!ok) t->dirty_chunks.insert(key);
      } else if (ok) {
        t->cache->MarkClean(key, gen);
      } else {
        t->cache->Relist(key);
      }
    }
    if (ok && r[i].type == Reply::Type::kInteger && is_sparse) t->redis_rows += r[i].integer;
  }
  if (is_sparse) t->MaybeEvict();
  return first.ok() ? marked : first;
}

Status RedisStore::Sync(uint32_t table) {
  if (config_.write_policy == config::WritePolicy::kWriteBack) return Status::OK();
  return Flush(table, client_.get());
}

Status RedisStore::FlushAll() {
  size_t n;
  {
    MutexLock l(&tables_mu_);
    n = tables_.size();
  }
  Status first;
  for (size_t t = 0; t < n; ++t) {
    Status s = Flush(static_cast<uint32_t>(t), client_.get());
    if (first.ok()) first = s;
  }
  return first;
}

uint64_t RedisStore::unflushed_rows() const {
  MutexLock l(&mu_);
  MutexLock tl(&tables_mu_);
  uint64_t n = 0;
  for (const auto& t : tables_) {
    if (t) n += t->is_sparse ? t->cache->dirty() : t->dirty_chunks.size();
  }
  return n;
}

}  // namespace osprey::server
