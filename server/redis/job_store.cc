#include "server/redis/job_store.h"

#ifdef OSPREY_HAVE_REDIS
#include "server/redis/redis_store.h"
#endif

namespace osprey::server {

StatusOr<JobStore> MakeJobStore(const config::StoreConfig& config) {
  JobStore js;
  if (config.type == config::StoreType::kNative) {
    OSPREY_ASSIGN_OR_RETURN(js.store, MakeStore("native"));
    js.take_over = [](int) { return Status::OK(); };
    return js;
  }
#ifdef OSPREY_HAVE_REDIS
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<RedisStore> redis, RedisStore::Connect(config.redis));
  RedisStore* r = redis.get();
  js.take_over = [r](int rank) { return r->TakeOver(rank); };
  js.store = std::move(redis);
  return js;
#else
  return Unimplemented("store.type: redis, but this osprey-server was built without hiredis "
                       "(install libhiredis-dev and rebuild)");
#endif
}

}  // namespace osprey::server
