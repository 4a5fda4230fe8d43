// RedisStore: checkpoint export / import, sizes, and the store factory.
#include <cstring>
#include <unordered_set>

#include "server/redis/redis_store.h"
#include "server/redis/redis_store_table.h"

namespace osprey::server {

using redis::Command;
using redis::Reply;
using redis_store::RowCache;

Status RedisStore::ExportRecords(uint32_t table, const RecordVisitor& visit) const {
  MutexLock l(&mu_);
  Table* t = any(table);
  if (t == nullptr) return Internal("no table " + std::to_string(table));
  if (!t->is_sparse) return dense_.ExportRecords(table, visit);
  // The cache has the newest copy of every row it holds (this server is the only writer); the
  // others are read from Redis, one HGETALL per bucket.
  std::vector<Command> all;
  for (uint32_t b = 0; b < redis_store::kBuckets; ++b) {
    all.push_back(Command{{"HGETALL", layout_->Rows(table, b)}});
  }
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute(all, &r));
  std::vector<float> rec(t->row_floats);
  uint64_t hist[kRowHistory];
  for (size_t b = 0; b < r.size(); ++b) {
    if (r[b].is_error()) return Internal("redis store: HGETALL " + all[b].args[1] + ": " + r[b].str);
    for (size_t i = 0; i + 1 < r[b].elements.size(); i += 2) {
      uint64_t key = std::strtoull(r[b].elements[i].str.c_str(), nullptr, 10);
      if (t->cache->Peek(key) != nullptr) continue;
      if (!redis_store::DecodeRow(r[b].elements[i + 1].str, t->row_floats, rec.data(), hist)) {
        return DataLoss("redis store: row " + r[b].elements[i].str + " of " + all[b].args[1] +
                        " has a blob of " + std::to_string(r[b].elements[i + 1].str.size()) +
                        " bytes");
      }
      OSPREY_RETURN_IF_ERROR(visit(key, rec.data(), t->row_floats));
    }
  }
  // Cached rows: only those in Redis or written here (a row only pulled is still initial, and
  // NativeStore exports those too -- so all cached rows are exported).
  std::vector<uint64_t> cached;
  t->cache->ForEach([&](uint64_t key, const RowCache::Row&) { cached.push_back(key); });
  for (uint64_t key : cached) {
    OSPREY_RETURN_IF_ERROR(visit(key, t->cache->Peek(key)->record, t->row_floats));
  }
  return Status::OK();
}

Status RedisStore::ExportKeys(uint32_t table, const std::function<Status(uint64_t)>& visit) const {
  MutexLock l(&mu_);
  Table* t = any(table);
  if (t == nullptr) return Internal("no table " + std::to_string(table));
  if (!t->is_sparse) {
    return dense_.ExportRecords(table, [&](uint64_t key, const float*, size_t) { return visit(key); });
  }
  std::vector<Command> all;
  for (uint32_t b = 0; b < redis_store::kBuckets; ++b) {
    all.push_back(Command{{"HKEYS", layout_->Rows(table, b)}});
  }
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute(all, &r));
  for (size_t b = 0; b < r.size(); ++b) {
    if (r[b].is_error()) return Internal("redis store: HKEYS " + all[b].args[1] + ": " + r[b].str);
    for (const Reply& field : r[b].elements) {
      const uint64_t key = std::strtoull(field.str.c_str(), nullptr, 10);
      if (t->cache->Peek(key) == nullptr) OSPREY_RETURN_IF_ERROR(visit(key));  // cached: below
    }
  }
  std::vector<uint64_t> cached;
  t->cache->ForEach([&](uint64_t key, const RowCache::Row&) { cached.push_back(key); });
  for (uint64_t key : cached) OSPREY_RETURN_IF_ERROR(visit(key));
  return Status::OK();
}

Status RedisStore::ImportRecord(uint32_t table, uint64_t key, const float* data, size_t floats) {
  size_t want = RecordFloats(table, key);
  if (floats != want) {
    return InvalidArgument("table " + std::to_string(table) + " record " + std::to_string(key) +
                           " has " + std::to_string(floats) + " floats, this server's layout needs " +
                           std::to_string(want) + " (another optimizer or dim?)");
  }
  MutexLock l(&mu_);
  Table* t = any(table);
  if (!t->is_sparse) {
    OSPREY_RETURN_IF_ERROR(dense_.ImportRecord(table, key, data, floats));
    t->initialized.insert(key);
    t->dirty_chunks.insert(key);
    return Status::OK();
  }
  RowCache::Row* row = t->cache->Find(key);
  if (row == nullptr) row = t->cache->Insert(key);
  std::memcpy(row->record, data, floats * sizeof(float));
  t->cache->MarkDirty(row);
  return Status::OK();
}

size_t RedisStore::RecordFloats(uint32_t table, uint64_t key) const {
  MutexLock l(&mu_);
  Table* t = any(table);
  if (t == nullptr) return 0;
  return t->is_sparse ? t->row_floats : dense_.RecordFloats(table, key);
}

size_t RedisStore::ChunkFloats(uint32_t table, uint64_t chunk) const {
  return dense_.ChunkFloats(table, chunk);
}

uint64_t RedisStore::num_rows(uint32_t table) const {
  MutexLock l(&mu_);
  Table* t = sparse(table);
  return t == nullptr ? 0 : t->redis_rows;
}

uint64_t RedisStore::cache_capacity(uint32_t table) const {
  MutexLock l(&mu_);
  Table* t = sparse(table);
  return t == nullptr ? 0 : t->cache->capacity();
}

uint64_t RedisStore::cached_rows(uint32_t table) const {
  MutexLock l(&mu_);
  Table* t = sparse(table);
  return t == nullptr ? 0 : t->cache->size();
}

StatusOr<std::unique_ptr<Store>> MakeConfiguredStore(const config::StoreConfig& config) {
  if (config.type == config::StoreType::kNative) return MakeStore("native");
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> s, RedisStore::Connect(config.redis));
  return std::unique_ptr<Store>(std::move(s));
}

}  // namespace osprey::server
