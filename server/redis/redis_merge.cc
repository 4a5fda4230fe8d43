// RedisStore, merge: redis: the window's merged gradients go to Redis and the function
// osprey_apply (redis_functions.cc) applies sgd / adagrad there, atomically per bucket and behind
// the same fencing check as osprey_put. The server keeps no rows of such a table: merge: redis
// needs write_through and cache_rows 0 (Connect refuses otherwise), so every pull reads Redis.
//
// Per bucket one FCALL: keys fence and rows; args rank, incarnation, optimizer, lr' and eps (4
// bytes each, little-endian floats), dim, state floats, the version (8 bytes, or empty), then per
// row its field and ONE blob: the scaled gradient (dim floats, g * grad_scale in float as the
// kernels do) followed by the row's initial record (used only when Redis has no such row: the
// initializer is the server's). Lua numbers are doubles: the function computes in double and
// rounds to float once per stored value, so its rows differ from the server's float kernels by
// rounding only (tests/redis_store/merge_redis_test.cc compares within a relative 1e-5).
#include <cstring>
#include <string>
#include <vector>

#include "server/redis/redis_store.h"
#include "server/redis/redis_store_table.h"

namespace osprey::server {

using redis::Command;
using redis::Reply;

bool RedisStore::applies_merged(uint32_t table) const {
  if (config_.merge != config::MergeSide::kRedis) return false;
  MutexLock l(&mu_);
  return sparse(table) != nullptr;
}

Status RedisStore::ApplyMergedRows(uint32_t table, const uint64_t* keys, size_t n,
                                   const float* const* gp, float grad_scale, float lr_scale,
                                   uint64_t version) {
  MutexLock l(&mu_);
  Table* t = sparse(table);
  if (t == nullptr) return Internal("no sparse table " + std::to_string(table));
  const size_t dim = static_cast<size_t>(t->dim);
  std::vector<std::vector<size_t>> by_bucket(redis_store::kBuckets);
  for (size_t i = 0; i < n; ++i) by_bucket[redis_store::BucketOf(keys[i])].push_back(i);
  const float lr = t->lr * lr_scale;
  const std::string rank = std::to_string(layout_->rank());
  const std::string inc = std::to_string(incarnation_);
  const std::string opt = t->adagrad ? "adagrad" : "sgd";
  const std::string dim_s = std::to_string(dim);
  const std::string state_s = std::to_string(t->row_floats - dim);
  std::vector<float> blob(dim + t->row_floats);
  std::vector<Command> cmds;
  for (uint32_t b = 0; b < redis_store::kBuckets; ++b) {
    if (by_bucket[b].empty()) continue;
    Command c;
    c.key_index = 3;
    c.args = {"FCALL", "osprey_apply", "2", layout_->BucketTag(table, b) + ":fence"};
    redis::RespWriter w(&c.resp, 13 + 2 * by_bucket[b].size());
    for (const std::string& a : c.args) w.Arg(a);
    w.Arg(layout_->Rows(table, b));
    w.Arg(rank);
    w.Arg(inc);
    w.Arg(opt);
    w.Arg(reinterpret_cast<const char*>(&lr), sizeof(float));
    w.Arg(reinterpret_cast<const char*>(&t->eps), sizeof(float));
    w.Arg(dim_s);
    w.Arg(state_s);
    w.Arg(reinterpret_cast<const char*>(&version), version > 0 ? sizeof(version) : 0);
    for (size_t i : by_bucket[b]) {
      for (size_t j = 0; j < dim; ++j) blob[j] = gp[i][j] * grad_scale;
      t->initializer->InitialWeights(keys[i], blob.data() + dim);
      t->state.init(blob.data() + 2 * dim, t->dim);
      w.ArgU64(keys[i]);
      w.Arg(reinterpret_cast<const char*>(blob.data()), blob.size() * sizeof(float));
    }
    cmds.push_back(std::move(c));
  }
  std::vector<Reply> r;
  OSPREY_RETURN_IF_ERROR(client_->Execute(cmds, &r));
  Status first;
  flushed_rows_.fetch_add(n, std::memory_order_relaxed);
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i].is_error()) {
      if (first.ok()) first = RedisReplyError(r[i], "applying merged gradients of table " +
                                                         std::to_string(table) + " in Redis");
    } else if (r[i].type == Reply::Type::kInteger) {
      t->redis_rows += static_cast<uint64_t>(r[i].integer);
    }
  }
  return first;
}

}  // namespace osprey::server
