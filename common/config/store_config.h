// StoreConfig: where the servers keep their parameters (the `store` section of a job config).
//
//   store:
//     type: redis                 # native (default: in memory) | redis
//     redis:
//       endpoints: 127.0.0.1:6379 # one node, or the seed nodes of a cluster ("h:p,h:p")
//       cluster: false            # route by slot (Redis Cluster)
//       key_prefix: osprey        # several jobs share one Redis: each its own prefix
//       write_policy: write_through  # write_through (ack after Redis has the window's rows)
//                                    # | write_back (flushed every flush_interval_ms)
//       flush_interval_ms: 100
//       cache_rows: 0             # hot-row cache in the server, in rows (0: no cache)
//       cache_bytes: 0            # or in bytes per table (rows + optimizer state + the cache's
//                                 # own bookkeeping); give one of the two
//       cache_policy: lru         # lru | lfu
//       user: ""                  # ACL user ("" = default)
//       password: ""              # AUTH; or password_file: a file holding it
//       connect_timeout_ms: 2000
//       io_timeout_ms: 5000
//       max_retries: 5
//       merge: server             # server (the server applies the optimizer) | redis (a Redis
//                                 # function applies it: sgd and adagrad only)
//       local: none               # none | node | cluster: `osprey launch` starts Redis itself
//
// ValidateStore checks what needs the tables (merge: redis only for sgd/adagrad tables).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace osprey::config {

class YamlFields;
struct TableConfig;

enum class StoreType { kNative, kRedis };
enum class WritePolicy { kWriteThrough, kWriteBack };
enum class CachePolicy { kLru, kLfu };
enum class MergeSide { kServer, kRedis };
enum class LocalRedis { kNone, kNode, kCluster };

struct RedisStoreConfig {
  std::string endpoints = "127.0.0.1:6379";
  bool cluster = false;
  std::string key_prefix = "osprey";
  WritePolicy write_policy = WritePolicy::kWriteThrough;
  int flush_interval_ms = 100;
  uint64_t cache_rows = 0;
  uint64_t cache_bytes = 0;  // when > 0, each sparse table's cache holds what fits in it
  CachePolicy cache_policy = CachePolicy::kLru;
  std::string user;
  std::string password;
  std::string password_file;  // read by the config loader into `password`
  int connect_timeout_ms = 2000;
  int io_timeout_ms = 5000;
  int max_retries = 5;
  MergeSide merge = MergeSide::kServer;
  LocalRedis local = LocalRedis::kNone;
};

struct StoreConfig {
  StoreType type = StoreType::kNative;
  RedisStoreConfig redis;
};

// Reads the `store` section (and its `redis` subsection) into *s.
void ParseStore(YamlFields& f, StoreConfig* s);

// Cross-field checks against the tables, and password_file read into password. Errors start
// with `file` and name the key to change.
Status ValidateStore(const std::string& file, const std::vector<TableConfig>& tables,
                     StoreConfig* s);

// "native" | "redis" | "redis-cluster" (for doctor and the report).
std::string StoreName(const StoreConfig& s);

}  // namespace osprey::config
