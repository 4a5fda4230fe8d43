// `osprey redis-inspect`: what a job's Redis store holds (commands.h).
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/redis/redis_client.h"
#include "job/job_config.h"
#include "server/redis/row_layout.h"
#include "tools/commands.h"

namespace osprey::tools {

using redis::Command;
using redis::Reply;

int RunRedisInspect(const std::string& config_path, const std::vector<std::string>& sets,
                    const std::string& table_name, int rows) {
  auto job = config::LoadJobConfig(config_path, sets);
  if (!job.ok()) {
    std::fprintf(stderr, "osprey redis-inspect: %s\n", job.status().ToString().c_str());
    return 2;
  }
  if (job->store.type != config::StoreType::kRedis) {
    std::fprintf(stderr, "osprey redis-inspect: %s: store.type is not redis\n", config_path.c_str());
    return 2;
  }
  int t = table_name.empty() ? 0 : job->TableIndex(table_name);
  if (t < 0) {
    std::fprintf(stderr, "osprey redis-inspect: no table '%s' in %s\n", table_name.c_str(),
                 config_path.c_str());
    return 2;
  }
  const config::RedisStoreConfig& rc = job->store.redis;
  auto seeds = redis::ParseEndpoints(rc.endpoints);
  if (!seeds.ok()) {
    std::fprintf(stderr, "osprey redis-inspect: store.redis.endpoints: %s\n",
                 seeds.status().ToString().c_str());
    return 2;
  }
  redis::RedisOptions o;
  o.seeds = *seeds;
  o.cluster = rc.cluster;
  o.user = rc.user;
  o.password = rc.password;
  o.connect_timeout_ms = rc.connect_timeout_ms;
  o.io_timeout_ms = rc.io_timeout_ms;
  auto client = redis::RedisClient::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "osprey redis-inspect: %s\n", client.status().ToString().c_str());
    return 1;
  }
  const config::TableConfig& tc = job->tables[t];
  const uint32_t id = static_cast<uint32_t>(t);
  server::redis_store::Layout meta(rc.key_prefix, 0);
  std::vector<Reply> r;
  if (!(*client)->Execute({Command{{"GET", meta.Meta(id)}}}, &r).ok() || r.empty()) return 1;
  std::printf("table '%s' (id %u), key prefix '%s' on %s\n  spec  %s\n", tc.name.c_str(), id,
              rc.key_prefix.c_str(), rc.endpoints.c_str(),
              r[0].is_nil() ? "(none: no server created it yet)" : r[0].str.c_str());
  if (tc.type != config::TableType::kSparse || r[0].is_nil()) return 0;
  size_t row_bytes = 0;
  for (int rank = 0; rank < job->cluster.num_servers; ++rank) {
    server::redis_store::Layout l(rc.key_prefix, rank);
    std::vector<Command> cmds;
    for (uint32_t b = 0; b < server::redis_store::kBuckets; ++b) cmds.push_back(Command{{"HLEN", l.Rows(id, b)}});
    if (!(*client)->Execute(cmds, &r).ok()) return 1;
    long long n = 0;
    for (const Reply& x : r) n += x.integer;
    std::printf("  server %d: %lld rows\n", rank, n);
    int shown = 0;
    for (uint32_t b = 0; b < server::redis_store::kBuckets && shown < rows; ++b) {
      if (!(*client)->Execute({Command{{"HSCAN", l.Rows(id, b), "0", "COUNT", "16"}}}, &r).ok() ||
          r.empty() || r[0].elements.size() < 2) {
        continue;
      }
      const std::vector<Reply>& kv = r[0].elements[1].elements;
      for (size_t i = 0; i + 1 < kv.size() && shown < rows; i += 2, ++shown) {
        const std::string& blob = kv[i + 1].str;
        row_bytes = blob.size();
        std::printf("    key %-20s %zu bytes  w[0..%d) =", kv[i].str.c_str(), blob.size(),
                    std::min(tc.dim, 4));
        for (int k = 0; k < std::min(tc.dim, 4) && (k + 1) * 4 <= static_cast<int>(blob.size()); ++k) {
          float f;
          std::memcpy(&f, blob.data() + 4 * k, 4);
          std::printf(" %.5f", f);
        }
        std::printf("\n");
      }
    }
  }
  if (row_bytes > 0) std::printf("  row blob: %zu bytes\n", row_bytes);
  return 0;
}

}  // namespace osprey::tools
