#include "server/redis/redis_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_set>

#include "common/logging.h"
#include "server/redis/redis_functions.h"
#include "server/redis/redis_store_table.h"

namespace osprey::server {

using redis::Command;
using redis::Reply;
using redis_store::RowCache;


Status RedisReplyError(const Reply& r, const std::string& what) {
  if (r.str.rfind(redis_store::kFencedError, 0) == 0) {
    return FailedPrecondition("redis store: " + what + " refused: " + r.str);
  }
  return Internal("redis store: " + what + ": Redis replied " + r.str);
}

std::string redis_store::SpecString(const StoreTableSpec& spec) {
  const config::TableConfig& c = spec.config;
  const bool sparse = c.type == config::TableType::kSparse;
  size_t width = sparse ? static_cast<size_t>(c.dim) : static_cast<size_t>(c.chunk_floats);
  std::string s = "osprey-redis-store/" + std::to_string(kFormatVersion);
  s += sparse ? " sparse" : " dense";
  s += " dim=" + std::to_string(sparse ? c.dim : 0);
  s += " size=" + std::to_string(sparse ? 0 : c.size);
  s += " chunk=" + std::to_string(sparse ? 0 : c.chunk_floats);
  s += " state=" + std::to_string(spec.state.floats(width));
  static const char* kInit[] = {"uniform", "normal", "zeros"};
  s += std::string(" init=") + kInit[static_cast<int>(c.init.type)] + "/" +
       std::to_string(c.init.seed) + "/" + std::to_string(c.init.scale);
  return s;
}

StatusOr<std::unique_ptr<RedisStore>> RedisStore::Connect(const config::RedisStoreConfig& config) {
  if (config.merge == config::MergeSide::kRedis &&
      (config.write_policy != config::WritePolicy::kWriteThrough || config.cache_rows != 0 ||
       config.cache_bytes != 0)) {
    return InvalidArgument("store.redis.merge: redis applies every window in Redis, so it needs "
                           "write_policy: write_through and no cache (cache_rows and cache_bytes 0; this config has " +
                           std::string(config.write_policy == config::WritePolicy::kWriteBack
                                           ? "write_back" : "write_through") +
                           ", cache_rows " + std::to_string(config.cache_rows) + ", cache_bytes " +
                           std::to_string(config.cache_bytes) + ")");
  }
  OSPREY_ASSIGN_OR_RETURN(std::vector<redis::Endpoint> seeds,
                          redis::ParseEndpoints(config.endpoints));
  redis::RedisOptions o;
  o.seeds = seeds;
  o.cluster = config.cluster;
  o.user = config.user;
  o.password = config.password;
  o.connect_timeout_ms = config.connect_timeout_ms;
  o.io_timeout_ms = config.io_timeout_ms;
  o.max_retries = config.max_retries;
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<redis::RedisClient> client,
                          redis::RedisClient::Connect(o));
  std::vector<Reply> replies;
  OSPREY_RETURN_IF_ERROR(client->ExecuteOnAllMasters(
      Command{{"FUNCTION", "LOAD", "REPLACE", redis_store::FunctionLibrary()}, -1}, &replies));
  for (const Reply& r : replies) {
    if (r.is_error()) return RedisReplyError(r, "FUNCTION LOAD of the store's library");
  }
  std::unique_ptr<redis::RedisClient> flush_client;
  if (config.write_policy == config::WritePolicy::kWriteBack) {
    OSPREY_ASSIGN_OR_RETURN(flush_client, redis::RedisClient::Connect(o));
  }
  std::unique_ptr<RedisStore> store(
      new RedisStore(config, std::move(client), std::move(flush_client)));
  if (store->flush_client_) store->flusher_ = std::thread([s = store.get()] { s->FlusherLoop(); });
  return store;
}

RedisStore::RedisStore(const config::RedisStoreConfig& config,
                       std::unique_ptr<redis::RedisClient> client,
                       std::unique_ptr<redis::RedisClient> flush_client)
    : config_(config), client_(std::move(client)), flush_client_(std::move(flush_client)) {}

RedisStore::~RedisStore() { Stop(); }

void RedisStore::Stop() {
  {
    MutexLock l(&stop_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_cv_.SignalAll();
  if (flusher_.joinable()) flusher_.join();
  if (!layout_) return;
  Status s = FlushAll();
  uint64_t left = unflushed_rows();
  if (!s.ok() || left > 0) {
    OSPREY_LOG_WARN("redis store: {} rows/chunks not written to Redis at stop: {}", left,
                    s.ToString());
  }
  // What this server created in Redis and how often the cluster moved keys under it: the
  // operator's (and the reshard test's) check that a reshard lost and doubled nothing.
  uint64_t rows = 0;
  for (uint32_t t = 0; any(t) != nullptr; ++t) rows += num_rows(t);
  const redis::RedisClient::Counters c = client_->counters();
  OSPREY_LOG_INFO("redis store: stopped with {} sparse rows in Redis; followed {} MOVED and {} ASK "
                  "redirections, {} retries, {} slot map reads",
                  rows, c.moved, c.asks, c.retries, c.map_refreshes);
}

Status RedisStore::TakeOver(int rank) {
  layout_ = std::make_unique<redis_store::Layout>(config_.key_prefix, rank);
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute({Command{{"INCR", layout_->Incarnation()}}}, &r));
  if (r.size() != 1 || r[0].type != Reply::Type::kInteger) {
    return Internal("redis store: INCR " + layout_->Incarnation() + ": " +
                    (r.empty() ? std::string("no reply") : r[0].DebugString()));
  }
  incarnation_ = static_cast<uint64_t>(r[0].integer);
  OSPREY_LOG_INFO("redis store: server rank {} is incarnation {} (key prefix '{}')", rank,
                  incarnation_, config_.key_prefix);
  return ReadPushMarks();
}

Status RedisStore::Claim(const std::vector<std::string>& fences) {
  std::vector<Command> cmds;
  const std::string rank = std::to_string(layout_->rank());
  const std::string inc = std::to_string(incarnation_);
  for (const std::string& f : fences) cmds.push_back(Command{{"FCALL", "osprey_claim", "1", f, rank, inc}, 3});
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute(cmds, &r));
  for (const Reply& x : r) {
    if (x.is_error()) return RedisReplyError(x, "taking over the rows of rank " + rank);
  }
  return Status::OK();
}

Status RedisStore::CheckMeta(const StoreTableSpec& spec) {
  const std::string key = layout_->Meta(spec.id);
  const std::string want = redis_store::SpecString(spec);
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute(
      {Command{{"SET", key, want, "NX"}}, Command{{"GET", key}}}, &r));
  if (r.size() != 2 || r[1].type != Reply::Type::kString) {
    return Internal("redis store: metadata key " + key + " unreadable");
  }
  if (r[1].str != want) {
    return FailedPrecondition("redis store: table '" + spec.config.name + "' (id " +
                              std::to_string(spec.id) + "): Redis key " + key + " holds a table "
                              "of another spec: Redis has '" + r[1].str + "', this job wants '" +
                              want + "' (another job's key_prefix? use a fresh prefix)");
  }
  return Status::OK();
}

Status RedisStore::CreateTable(const StoreTableSpec& spec) {
  if (!spec.state.floats || !spec.state.init) {
    return Internal("table id " + std::to_string(spec.id) + " has no state layout");
  }
  if (!layout_) return Internal("redis store: CreateTable before TakeOver (rank unknown)");
  OSPREY_RETURN_IF_ERROR(CheckMeta(spec));
  auto t = std::make_unique<Table>();
  t->id = spec.id;
  t->state = spec.state;
  std::vector<std::string> fences;
  std::vector<Reply> r;
  if (spec.config.type == config::TableType::kSparse) {
    t->dim = spec.config.dim;
    t->row_floats = spec.config.dim + spec.state.floats(spec.config.dim);
    t->initializer = std::make_unique<SparseTable>(spec.id, spec.config.dim, spec.config.init,
                                                   spec.state);
    const uint64_t capacity = config_.cache_bytes > 0
                                  ? config_.cache_bytes / RowCache::BytesPerRow(t->row_floats)
                                  : config_.cache_rows;
    if (config_.cache_bytes > 0) {
      OSPREY_LOG_INFO("redis store: table '{}' caches up to {} rows (cache_bytes {} / ~{} bytes a row)",
                      spec.config.name, capacity, config_.cache_bytes, RowCache::BytesPerRow(t->row_floats));
    }
    t->cache = std::make_unique<RowCache>(t->row_floats, capacity, config_.cache_policy);
    const config::OptimizerConfig& opt = spec.config.optimizer;
    if (config_.merge == config::MergeSide::kRedis &&
        (!(opt.type == config::OptimizerType::kSgd || opt.type == config::OptimizerType::kAdagrad) ||
         opt.clip_value != 0 || opt.clip_norm != 0 || opt.weight_decay != 0)) {
      return InvalidArgument("table '" + spec.config.name + "': store.redis.merge: redis applies "
                             "only sgd and adagrad without clip_value, clip_norm or weight_decay "
                             "(use merge: server)");
    }
    t->adagrad = opt.type == config::OptimizerType::kAdagrad;
    t->lr = opt.lr;
    t->eps = opt.eps;
    std::vector<Command> counts;
    for (uint32_t b = 0; b < redis_store::kBuckets; ++b) {
      fences.push_back(layout_->BucketTag(spec.id, b) + ":fence");
      counts.push_back(Command{{"HLEN", layout_->Rows(spec.id, b)}});
    }
    OSPREY_RETURN_IF_ERROR(Claim(fences));
    OSPREY_RETURN_IF_ERROR(client_->Execute(counts, &r));
    for (const Reply& x : r) {
      if (x.type == Reply::Type::kInteger) t->redis_rows += static_cast<uint64_t>(x.integer);
    }
  } else {
    t->is_sparse = false;
    OSPREY_RETURN_IF_ERROR(dense_.CreateTable(spec));
    std::vector<Command> gets;
    for (uint64_t c : spec.owned_chunks) {
      fences.push_back(layout_->ChunkTag(spec.id, c) + ":fence");
      gets.push_back(Command{{"GET", layout_->ChunkTag(spec.id, c)}});
    }
    OSPREY_RETURN_IF_ERROR(Claim(fences));
    OSPREY_RETURN_IF_ERROR(client_->Execute(gets, &r));
    for (size_t i = 0; i < r.size(); ++i) {
      if (r[i].is_nil()) continue;
      uint64_t c = spec.owned_chunks[i];
      size_t floats = dense_.RecordFloats(spec.id, c);
      if (r[i].type != Reply::Type::kString || r[i].str.size() != floats * sizeof(float)) {
        return DataLoss("redis store: chunk key " + layout_->ChunkTag(spec.id, c) + " has " +
                        std::to_string(r[i].str.size()) + " bytes, this layout needs " +
                        std::to_string(floats * sizeof(float)));
      }
      std::vector<float> rec(floats);
      std::memcpy(rec.data(), r[i].str.data(), r[i].str.size());
      OSPREY_RETURN_IF_ERROR(dense_.ImportRecord(spec.id, c, rec.data(), floats));
      t->initialized.insert(c);
    }
  }
  MutexLock l(&mu_);
  MutexLock tl(&tables_mu_);
  if (spec.id >= tables_.size()) tables_.resize(spec.id + 1);
  if (tables_[spec.id]) return Internal("table id " + std::to_string(spec.id) + " created twice");
  tables_[spec.id] = std::move(t);
  return Status::OK();
}

RedisStore::Table* RedisStore::any(uint32_t table) const {
  MutexLock l(&tables_mu_);
  return table < tables_.size() ? tables_[table].get() : nullptr;
}

RedisStore::Table* RedisStore::sparse(uint32_t table) const {
  Table* t = any(table);
  return t != nullptr && t->is_sparse ? t : nullptr;
}

Status RedisStore::Fetch(Table* t, const uint64_t* keys, size_t n, bool create) {
  std::vector<uint64_t>& miss = t->miss;
  miss.clear();
  // Each key's row, resolved once here for the caller (t->resolved); the misses filled in below.
  std::vector<RowCache::Row*>& resolved = t->resolved;
  resolved.resize(n);
  constexpr size_t kAhead = 8;  // index slots prefetched this many keys ahead
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) t->cache->Prefetch(keys[i + kAhead]);
    resolved[i] = t->cache->Find(keys[i]);
    if (resolved[i] == nullptr) miss.push_back(keys[i]);
  }
  if (miss.empty()) return Status::OK();

  std::sort(miss.begin(), miss.end());
  miss.erase(std::unique(miss.begin(), miss.end()), miss.end());
  // One HMGET per bucket of the misses, formatted straight into the protocol buffer.
  std::vector<std::vector<uint64_t>>& by_bucket = t->by_bucket;
  by_bucket.resize(redis_store::kBuckets);
  for (auto& v : by_bucket) v.clear();
  for (uint64_t k : miss) by_bucket[redis_store::BucketOf(k)].push_back(k);
  std::vector<Command> gets;
  std::vector<uint32_t> buckets;
  for (uint32_t b = 0; b < redis_store::kBuckets; ++b) {
    if (by_bucket[b].empty()) continue;
    Command c;
    c.args = {"HMGET", layout_->Rows(t->id, b)};
    c.resp.reserve(32 + c.args[1].size() + 28 * by_bucket[b].size());
    redis::RespWriter w(&c.resp, 2 + by_bucket[b].size());
    w.Arg(c.args[0]);
    w.Arg(c.args[1]);
    for (uint64_t k : by_bucket[b]) w.ArgU64(k);
    gets.push_back(std::move(c));
    buckets.push_back(b);
  }
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute(gets, &r));
  for (size_t j = 0; j < gets.size(); ++j) {
    const std::vector<uint64_t>& keys_b = by_bucket[buckets[j]];
    if (r[j].is_error()) return RedisReplyError(r[j], "HMGET " + gets[j].args[1]);
    if (r[j].elements.size() != keys_b.size()) {
      return Internal("redis store: HMGET " + gets[j].args[1] + " answered " +
                      std::to_string(r[j].elements.size()) + " of " +
                      std::to_string(keys_b.size()) + " fields");
    }
    for (size_t i = 0; i < keys_b.size(); ++i) {
      const Reply& x = r[j].elements[i];
      if (x.is_nil()) {
        if (!create) continue;
        RowCache::Row* row = t->cache->Insert(keys_b[i]);
        t->initializer->InitialWeights(keys_b[i], row->record);
        t->state.init(row->record + t->dim, t->dim);
        continue;
      }
      RowCache::Row* row = t->cache->Insert(keys_b[i]);
      if (!redis_store::DecodeRow(x.str, t->row_floats, row->record, row->history)) {
        return DataLoss("redis store: row " + std::to_string(keys_b[i]) + " of " +
                        gets[j].args[1] + " has " + std::to_string(x.str.size()) +
                        " bytes, this layout needs " +
                        std::to_string(redis_store::RowBlobBytes(t->row_floats)));
      }
    }
  }
  // Rows keep their addresses as others are inserted (row_cache.h): the hits are still valid.
  for (size_t i = 0; i < n; ++i) {
    if (resolved[i] == nullptr) resolved[i] = t->cache->Peek(keys[i]);
  }
  return Status::OK();
}

Status RedisStore::PullRows(uint32_t table, const uint64_t* keys, size_t n, float* out) {
  MutexLock l(&mu_);
  Table* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  OSPREY_RETURN_IF_ERROR(Fetch(t, keys, n, /*create=*/true));
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(out + i * t->dim, t->resolved[i]->record, t->dim * sizeof(float));
  }
  t->MaybeEvict();
  return Status::OK();
}

Status RedisStore::VisitRows(uint32_t table, const uint64_t* keys, size_t n, RowAccess access,
                             const RowBlockFn& fn) {
  MutexLock l(&mu_);
  Table* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  OSPREY_RETURN_IF_ERROR(Fetch(t, keys, n, access != RowAccess::kRead));
  Status s;
  for (size_t begin = 0; begin < n && s.ok(); begin += kRowBlockRows) {
    const size_t m = std::min(kRowBlockRows, n - begin);
    s = VisitBlock(t, t->resolved.data() + begin, m, begin, access == RowAccess::kUpdate, fn);
  }
  if (access != RowAccess::kUpdate) t->MaybeEvict();
  return s;
}

Status RedisStore::VisitBlock(Table* t, RowCache::Row* const* found, size_t m, size_t begin,
                              bool update, const RowBlockFn& fn) {
  t->rows.resize(m);
  t->history.resize(m);
  for (size_t i = 0; i < m; ++i) {
    t->rows[i] = found[i] ? found[i]->record : nullptr;
    t->history[i] = found[i] ? found[i]->history : nullptr;
  }
  Status s = fn(RowBlock{begin, m, t->rows.data(), t->history.data()});
  if (update) {
    for (size_t i = 0; i < m; ++i) t->cache->MarkDirty(found[i]);
  }
  return s;
}

Status RedisStore::PullChunks(uint32_t table, const uint64_t* chunks, size_t n, float* out) {
  MutexLock l(&mu_);
  return dense_.PullChunks(table, chunks, n, out);
}

bool RedisStore::PullChunksView(uint32_t table, const uint64_t* chunks, size_t n, Buffer* out) {
  MutexLock l(&mu_);
  return dense_.PullChunksView(table, chunks, n, out);
}

Status RedisStore::VisitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                               const ChunkBlockFn& fn) {
  MutexLock l(&mu_);
  Table* t = any(table);
  if (t == nullptr || t->is_sparse) return Internal("no dense table " + std::to_string(table));
  Status s = dense_.VisitChunks(table, chunks, n, fn);
  for (size_t i = 0; i < n; ++i) t->dirty_chunks.insert(chunks[i]);
  return s;
}

Status RedisStore::InitChunks(uint32_t table, const uint64_t* chunks, size_t n,
                              const float* values) {
  MutexLock l(&mu_);
  Table* t = any(table);
  if (t == nullptr || t->is_sparse) return Internal("no dense table " + std::to_string(table));
  OSPREY_RETURN_IF_ERROR(dense_.InitChunks(table, chunks, n, values));
  for (size_t i = 0; i < n; ++i) {
    if (t->initialized.insert(chunks[i]).second) t->dirty_chunks.insert(chunks[i]);
  }
  return Status::OK();
}

}  // namespace osprey::server
