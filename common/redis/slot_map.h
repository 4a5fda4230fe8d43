// SlotMap: which master owns each of the 16384 Redis Cluster slots, read from a CLUSTER SLOTS
// reply (CLUSTER SHARDS is Redis 7.0+ only; SLOTS answers on every version). A single node is a
// map whose one master owns every slot. Internal to osprey::redis. A value; not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "common/redis/redis_client.h"

namespace osprey::redis {

class SlotMap {
 public:
  SlotMap() : owner_(RedisClient::kNumSlots, -1) {}
  static SlotMap SingleNode(const Endpoint& node);
  // Parses a CLUSTER SLOTS reply ([[start, end, [ip, port, id...], replica...], ...]); `asked`
  // is the node that answered: an empty ip in the reply means its host. InvalidArgument naming
  // the entry when the reply is malformed.
  static StatusOr<SlotMap> FromClusterSlots(const Reply& reply, const Endpoint& asked);

  // Index into masters() of the slot's owner; -1 when no master owns the slot.
  int MasterOf(uint16_t slot) const { return owner_[slot]; }
  const std::vector<Endpoint>& masters() const { return masters_; }
  size_t num_unassigned() const;

 private:
  std::vector<int16_t> owner_;  // kNumSlots entries
  std::vector<Endpoint> masters_;
};

}  // namespace osprey::redis
