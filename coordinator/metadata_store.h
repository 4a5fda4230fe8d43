// MetadataStore: where a coordinator keeps the job's metadata (its session id and its last
// ClusterState: nodes, endpoints, epoch, deaths, reports) so that a coordinator restarted with
// --recover reads it back before any node re-registers (job_state_recover.cc). The nodes carry
// the same facts in their re-registrations; the store also covers what no live node holds (a
// worker that reported and exited just before the kill). Kept in Redis when the job's store is
// redis (store.redis: endpoints, key_prefix; key "<key_prefix>:coordinator").
//
// Thread-safety: a store is called from one thread at a time (the coordinator's timer thread,
// or Start()).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "common/config/store_config.h"
#include "common/status.h"
#include "osprey.pb.h"

namespace osprey::coordinator {

struct StoredMetadata {
  uint64_t session_id = 0;
  proto::ClusterState state;
};

class MetadataStore {
 public:
  virtual ~MetadataStore() = default;
  // Replaces what is stored.
  virtual Status Save(const StoredMetadata& metadata) = 0;
  // What was stored; nullopt when nothing was.
  virtual StatusOr<std::optional<StoredMetadata>> Load() = 0;
};

// The Redis one (store.redis of the job config); Unimplemented in a build without hiredis.
StatusOr<std::unique_ptr<MetadataStore>> MakeRedisMetadataStore(const config::RedisStoreConfig& config);

}  // namespace osprey::coordinator
