#include "coordinator/metadata_store.h"

#include <string>
#include <vector>

#ifdef OSPREY_HAVE_REDIS
#include "common/redis/redis_client.h"
#endif

namespace osprey::coordinator {

#ifdef OSPREY_HAVE_REDIS
namespace {

// HSET <prefix>:coordinator session <decimal> state <serialized ClusterState>.
class RedisMetadataStore : public MetadataStore {
 public:
  RedisMetadataStore(std::unique_ptr<redis::RedisClient> client, std::string key)
      : client_(std::move(client)), key_(std::move(key)) {}

  Status Save(const StoredMetadata& m) override {
    std::vector<redis::Reply> r;
    OSPREY_RETURN_IF_ERROR(client_->Execute(
        {redis::Command{{"HSET", key_, "session", std::to_string(m.session_id), "state",
                         m.state.SerializeAsString()}}},
        &r));
    if (!r.empty() && r[0].is_error()) {
      return Unavailable("saving the job's metadata at " + key_ + ": " + r[0].str);
    }
    return Status::OK();
  }

  StatusOr<std::optional<StoredMetadata>> Load() override {
    std::vector<redis::Reply> r;
    OSPREY_RETURN_IF_ERROR(client_->Execute({redis::Command{{"HMGET", key_, "session", "state"}}}, &r));
    if (r.empty() || r[0].is_error() || r[0].elements.size() != 2) {
      return Unavailable("reading the job's metadata at " + key_ + ": " +
                         (r.empty() ? std::string("no reply") : r[0].DebugString()));
    }
    const redis::Reply& session = r[0].elements[0];
    const redis::Reply& state = r[0].elements[1];
    if (session.is_nil() || state.is_nil()) return std::optional<StoredMetadata>();
    StoredMetadata m;
    try {
      m.session_id = std::stoull(session.str);
    } catch (...) {
      return InvalidArgument(key_ + " holds session '" + session.str + "', not a number");
    }
    if (!m.state.ParseFromString(state.str)) {
      return InvalidArgument(key_ + " holds a state of " + std::to_string(state.str.size()) +
                             " bytes that is not a ClusterState");
    }
    return std::optional<StoredMetadata>(std::move(m));
  }

 private:
  std::unique_ptr<redis::RedisClient> client_;
  std::string key_;
};

}  // namespace

StatusOr<std::unique_ptr<MetadataStore>> MakeRedisMetadataStore(const config::RedisStoreConfig& config) {
  OSPREY_ASSIGN_OR_RETURN(std::vector<redis::Endpoint> seeds, redis::ParseEndpoints(config.endpoints));
  redis::RedisOptions o;
  o.seeds = seeds;
  o.cluster = config.cluster;
  o.user = config.user;
  o.password = config.password;
  o.connect_timeout_ms = config.connect_timeout_ms;
  o.io_timeout_ms = config.io_timeout_ms;
  o.max_retries = config.max_retries;
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<redis::RedisClient> client, redis::RedisClient::Connect(o));
  return std::unique_ptr<MetadataStore>(
      new RedisMetadataStore(std::move(client), config.key_prefix + ":coordinator"));
}

#else

StatusOr<std::unique_ptr<MetadataStore>> MakeRedisMetadataStore(const config::RedisStoreConfig&) {
  return Unimplemented("the job's metadata in Redis: this osprey-coordinator was built without hiredis");
}

#endif

}  // namespace osprey::coordinator
