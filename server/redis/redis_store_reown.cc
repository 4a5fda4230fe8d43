// RedisStore's rows handed over in place by a scale step (Store::ReownRows; the server's side is
// server/migration/server_reshard.cc). The old owner
//   1. lists its keys (HKEYS per bucket, plus the cached rows) and picks the moving ones;
//   2. writes what Redis lacks of them: dirty rows, and rows only pulled so far (initial, never
//      written), so that every moving row is in its bucket;
//   3. drops them from its cache and moves them to the new owner's buckets: one fenced
//      osprey_move per (bucket, new owner, kRowsPerCall rows) on one node, atomic per call; on
//      a Redis Cluster, osprey_take (the fenced read), HSET into the new bucket, then osprey_del
//      (a failure in between leaves a row in both buckets, never in none).
// All of it under flush_mu_: no flush (write_back's flusher) writes and evicts a row between the
// listing and the move. The new owner recounts its rows (AdoptRows) when the old owner tells it
// (OP_MIGRATE_ROWS with reowned_rows): every row is found in its buckets from then on.
#include <string>
#include <unordered_set>
#include <vector>

#include "server/redis/redis_store.h"
#include "server/redis/redis_store_table.h"

namespace osprey::server {

using redis::Command;
using redis::Reply;
using redis_store::RowCache;

namespace {

// The moving fields of one bucket for one new owner.
struct Moving {
  uint32_t bucket = 0;
  int dest = 0;
  std::vector<std::string> fields;
};

}  // namespace

Status RedisStore::ReownRows(uint32_t table, int self, int ranks,
                             const std::function<int(uint64_t)>& owner,
                             std::vector<uint64_t>* moved, uint64_t* kept) {
  moved->assign(static_cast<size_t>(ranks), 0);
  *kept = 0;
  // No flush from the listing to the end: one running meanwhile (write_back's flusher) could
  // write a row the listing missed and evict it from the cache, and the row would stay behind.
  MutexLock flushing(&flush_mu_);
  std::vector<Command> hkeys;
  for (uint32_t b = 0; b < redis_store::kBuckets; ++b) {
    hkeys.push_back(Command{{"HKEYS", layout_->Rows(table, b)}});
  }
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute(hkeys, &r));
  // by_bucket[b][dest]: the fields moving from bucket b to rank dest.
  std::vector<std::vector<std::vector<std::string>>> by_bucket(
      redis_store::kBuckets, std::vector<std::vector<std::string>>(static_cast<size_t>(ranks)));
  std::unordered_set<uint64_t> in_redis;  // the moving keys Redis has
  auto place = [&](uint64_t key, std::string field) -> Status {
    const int dest = owner(key);
    if (dest == self) return Status::OK();
    if (dest < 0 || dest >= ranks) {
      return Internal("scale: row " + field + " placed on rank " + std::to_string(dest) +
                      " of " + std::to_string(ranks));
    }
    by_bucket[redis_store::BucketOf(key)][static_cast<size_t>(dest)].push_back(std::move(field));
    return Status::OK();
  };
  for (size_t b = 0; b < r.size(); ++b) {
    if (r[b].is_error()) return Internal("redis store: HKEYS " + hkeys[b].args[1] + ": " + r[b].str);
    for (Reply& f : r[b].elements) {
      const uint64_t key = std::strtoull(f.str.c_str(), nullptr, 10);
      if (owner(key) != self) in_redis.insert(key);
      OSPREY_RETURN_IF_ERROR(place(key, std::move(f.str)));
    }
  }
  r.clear();
  {
    // Moving rows Redis lacks (only pulled, or created and not yet flushed): written by the
    // flush below. Rows kept here stay as they are.
    MutexLock l(&mu_);
    Table* t = sparse(table);
    if (t == nullptr) return Internal("redis store: ReownRows on table " + std::to_string(table) + ", not a sparse table");
    std::vector<uint64_t> absent;
    t->cache->ForEach([&](uint64_t key, const RowCache::Row&) {
      if (!in_redis.count(key) && owner(key) != self) absent.push_back(key);
    });
    for (uint64_t key : absent) {
      t->cache->MarkDirty(t->cache->Peek(key));
      OSPREY_RETURN_IF_ERROR(place(key, redis_store::Layout::Field(key)));
    }
  }
  OSPREY_RETURN_IF_ERROR(FlushLocked(table, client_.get()));  // every moving row is in Redis now
  std::vector<Moving> work;
  {
    MutexLock l(&mu_);
    Table* t = sparse(table);
    std::vector<uint64_t> keys;
    for (uint32_t b = 0; b < redis_store::kBuckets; ++b) {
      for (int d = 0; d < ranks; ++d) {
        std::vector<std::string>& fields = by_bucket[b][static_cast<size_t>(d)];
        for (size_t from = 0; from < fields.size(); from += redis_store::kRowsPerCall) {
          Moving m{b, d, {}};
          const size_t to = std::min(fields.size(), from + redis_store::kRowsPerCall);
          for (size_t i = from; i < to; ++i) {
            keys.push_back(std::strtoull(fields[i].c_str(), nullptr, 10));
            m.fields.push_back(std::move(fields[i]));
          }
          work.push_back(std::move(m));
        }
      }
    }
    t->cache->Erase(keys.data(), keys.size());
  }
  by_bucket.clear();
  const std::string rank = std::to_string(layout_->rank());
  const std::string inc = std::to_string(incarnation_);
  auto dest_rows = [&](const Moving& m) {
    return redis_store::Layout(config_.key_prefix, m.dest).Rows(table, m.bucket);
  };
  uint64_t total = 0;
  if (!config_.cluster) {
    std::vector<Command> cmds;
    for (const Moving& m : work) {
      const std::string tag = layout_->BucketTag(table, m.bucket);
      Command c{{"FCALL", "osprey_move", "3", tag + ":fence", layout_->Rows(table, m.bucket),
                 dest_rows(m), rank, inc}, 3};
      c.args.insert(c.args.end(), m.fields.begin(), m.fields.end());
      cmds.push_back(std::move(c));
    }
    OSPREY_RETURN_IF_ERROR(client_->Execute(cmds, &r));
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i].is_error()) return RedisReplyError(r[i], "handing rows to server " + std::to_string(work[i].dest));
      if (r[i].type == Reply::Type::kInteger) {
        (*moved)[static_cast<size_t>(work[i].dest)] += static_cast<uint64_t>(r[i].integer);
        total += static_cast<uint64_t>(r[i].integer);
      }
    }
  } else {
    std::vector<Command> reads;
    for (const Moving& m : work) {
      Command c{{"FCALL", "osprey_take", "2", layout_->BucketTag(table, m.bucket) + ":fence",
                 layout_->Rows(table, m.bucket), rank, inc}, 3};
      c.args.insert(c.args.end(), m.fields.begin(), m.fields.end());
      reads.push_back(std::move(c));
    }
    OSPREY_RETURN_IF_ERROR(client_->Execute(reads, &r));
    reads.clear();
    std::vector<Command> writes, dels;
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i].is_error()) return RedisReplyError(r[i], "reading the rows to hand over");
      Command w{{"HSET", dest_rows(work[i])}, 1};
      Command d{{"FCALL", "osprey_del", "2", layout_->BucketTag(table, work[i].bucket) + ":fence",
                 layout_->Rows(table, work[i].bucket), rank, inc}, 3};
      for (size_t j = 0; j < r[i].elements.size() && j < work[i].fields.size(); ++j) {
        if (r[i].elements[j].is_nil()) continue;
        w.args.push_back(work[i].fields[j]);
        w.args.push_back(std::move(r[i].elements[j].str));
        d.args.push_back(work[i].fields[j]);
      }
      if (d.args.size() == 7) continue;
      (*moved)[static_cast<size_t>(work[i].dest)] += d.args.size() - 7;
      total += d.args.size() - 7;
      writes.push_back(std::move(w));
      dels.push_back(std::move(d));
    }
    for (const std::vector<Command>* batch : {&writes, &dels}) {  // deleted only once written
      OSPREY_RETURN_IF_ERROR(client_->Execute(*batch, &r));
      for (const Reply& x : r) {
        if (x.is_error()) return RedisReplyError(x, "handing rows to their new owner");
      }
    }
  }
  MutexLock l(&mu_);
  Table* t = sparse(table);
  t->redis_rows -= std::min(t->redis_rows, total);  // the flush above counted every row written
  *kept = t->redis_rows;
  return Status::OK();
}

Status RedisStore::AdoptRows(uint32_t table) {
  MutexLock flushing(&flush_mu_);  // a flush meanwhile would count its new rows twice
  std::vector<Command> counts;
  for (uint32_t b = 0; b < redis_store::kBuckets; ++b) {
    counts.push_back(Command{{"HLEN", layout_->Rows(table, b)}});
  }
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute(counts, &r));
  uint64_t rows = 0;
  for (size_t b = 0; b < r.size(); ++b) {
    if (r[b].is_error()) return Internal("redis store: HLEN " + counts[b].args[1] + ": " + r[b].str);
    if (r[b].type == Reply::Type::kInteger) rows += static_cast<uint64_t>(r[b].integer);
  }
  MutexLock l(&mu_);
  Table* t = sparse(table);
  if (t == nullptr) return Internal("redis store: AdoptRows on table " + std::to_string(table) + ", not a sparse table");
  t->redis_rows = rows;
  return Status::OK();
}

}  // namespace osprey::server
