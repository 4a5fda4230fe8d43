#include "common/config/store_config.h"

#include <fstream>
#include <sstream>

#include "common/config/table_config.h"
#include "common/config/yaml_fields.h"

namespace osprey::config {

void ParseStore(YamlFields& f, StoreConfig* s) {
  f.GetEnum("type", &s->type, {{"native", StoreType::kNative}, {"redis", StoreType::kRedis}});
  f.Section("redis", [&](YamlFields& r) {
    RedisStoreConfig& c = s->redis;
    r.Get("endpoints", &c.endpoints);
    r.Get("cluster", &c.cluster);
    r.Get("key_prefix", &c.key_prefix);
    r.GetEnum("write_policy", &c.write_policy,
              {{"write_through", WritePolicy::kWriteThrough},
               {"write_back", WritePolicy::kWriteBack}});
    r.Get("flush_interval_ms", &c.flush_interval_ms, 1, 3600000);
    r.Get("cache_rows", &c.cache_rows, 0, uint64_t{1} << 40);
    r.Get("cache_bytes", &c.cache_bytes, 0, uint64_t{1} << 50);
    r.GetEnum("cache_policy", &c.cache_policy,
              {{"lru", CachePolicy::kLru}, {"lfu", CachePolicy::kLfu}});
    r.Get("user", &c.user);
    r.Get("password", &c.password);
    r.Get("password_file", &c.password_file);
    r.Get("connect_timeout_ms", &c.connect_timeout_ms, 1, 600000);
    r.Get("io_timeout_ms", &c.io_timeout_ms, 1, 600000);
    r.Get("max_retries", &c.max_retries, 0, 100);
    r.GetEnum("merge", &c.merge, {{"server", MergeSide::kServer}, {"redis", MergeSide::kRedis}});
    r.GetEnum("local", &c.local,
              {{"none", LocalRedis::kNone}, {"node", LocalRedis::kNode},
               {"cluster", LocalRedis::kCluster}});
    if (!r.ok()) return;
    if (c.endpoints.empty() && c.local == LocalRedis::kNone) {
      r.Fail("endpoints", "is empty (give host:port[,host:port...] or local: node|cluster)");
    } else if (c.key_prefix.empty()) {
      r.Fail("key_prefix", "is empty (jobs sharing a Redis need distinct prefixes)");
    } else if (c.key_prefix.find_first_of("{}: \t\r\n") != std::string::npos) {
      r.Fail("key_prefix", "'" + c.key_prefix + "' contains one of '{', '}', ':' or whitespace");
    } else if (c.cache_rows != 0 && c.cache_bytes != 0) {
      r.Fail("cache_bytes", "is set together with cache_rows (size the cache in one of them)");
    } else if (!c.password.empty() && !c.password_file.empty()) {
      r.Fail("password_file", "is set together with password (give one)");
    } else if (c.local == LocalRedis::kCluster && !c.cluster) {
      r.Fail("cluster", "is false but local: cluster starts a Redis Cluster (set cluster: true)");
    } else if (c.local == LocalRedis::kNode && c.cluster) {
      r.Fail("cluster", "is true but local: node starts one plain node (use local: cluster)");
    }
  });
}

Status ValidateStore(const std::string& file, const std::vector<TableConfig>& tables,
                     StoreConfig* s) {
  if (s->type != StoreType::kRedis) return Status::OK();
  RedisStoreConfig& c = s->redis;
  if (!c.password_file.empty()) {
    std::ifstream in(c.password_file);
    if (!in) {
      return InvalidArgument(file + ": store.redis.password_file: cannot read '" +
                             c.password_file + "'");
    }
    std::stringstream ss;
    ss << in.rdbuf();
    std::string p = ss.str();
    while (!p.empty() && (p.back() == '\n' || p.back() == '\r')) p.pop_back();
    if (p.empty()) {
      return InvalidArgument(file + ": store.redis.password_file: '" + c.password_file +
                             "' is empty");
    }
    c.password = p;
  }
  if (c.merge == MergeSide::kRedis) {
    for (size_t i = 0; i < tables.size(); ++i) {
      OptimizerType t = tables[i].optimizer.type;
      if (t != OptimizerType::kSgd && t != OptimizerType::kAdagrad) {
        return InvalidArgument(file + ": store.redis.merge: redis applies only sgd and adagrad, "
                               "but tables[" + std::to_string(i) + "] ('" + tables[i].name +
                               "') uses another optimizer (use merge: server)");
      }
    }
  }
  return Status::OK();
}

std::string StoreName(const StoreConfig& s) {
  if (s.type == StoreType::kNative) return "native";
  return s.redis.cluster ? "redis-cluster" : "redis";
}

}  // namespace osprey::config
