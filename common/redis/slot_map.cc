// SlotMap from CLUSTER SLOTS.
#include "common/redis/slot_map.h"

#include <algorithm>

namespace osprey::redis {

SlotMap SlotMap::SingleNode(const Endpoint& node) {
  SlotMap m;
  m.masters_.push_back(node);
  std::fill(m.owner_.begin(), m.owner_.end(), 0);
  return m;
}

size_t SlotMap::num_unassigned() const {
  return static_cast<size_t>(std::count(owner_.begin(), owner_.end(), -1));
}

StatusOr<SlotMap> SlotMap::FromClusterSlots(const Reply& reply, const Endpoint& asked) {
  const std::string where = "CLUSTER SLOTS reply from " + asked.ToString();
  if (reply.type != Reply::Type::kArray) {
    return InvalidArgument(where + ": not an array (" + reply.DebugString() + ")");
  }
  SlotMap m;
  for (size_t e = 0; e < reply.elements.size(); ++e) {
    const Reply& range = reply.elements[e];
    const std::string at = where + ", entry " + std::to_string(e);
    if (range.type != Reply::Type::kArray || range.elements.size() < 3 ||
        range.elements[0].type != Reply::Type::kInteger || range.elements[1].type != Reply::Type::kInteger) {
      return InvalidArgument(at + ": want [start, end, [ip, port, ...], ...], got " + range.DebugString());
    }
    const long long start = range.elements[0].integer, end = range.elements[1].integer;
    if (start < 0 || end >= RedisClient::kNumSlots || start > end) {
      return InvalidArgument(at + ": bad slot range " + std::to_string(start) + ".." + std::to_string(end));
    }
    const Reply& node = range.elements[2];
    if (node.type != Reply::Type::kArray || node.elements.size() < 2 ||
        node.elements[0].type != Reply::Type::kString || node.elements[1].type != Reply::Type::kInteger) {
      return InvalidArgument(at + ": bad master entry " + node.DebugString());
    }
    Endpoint master{node.elements[0].str.empty() ? asked.host : node.elements[0].str,
                    static_cast<int>(node.elements[1].integer)};
    auto it = std::find(m.masters_.begin(), m.masters_.end(), master);
    const int index = static_cast<int>(it - m.masters_.begin());
    if (it == m.masters_.end()) m.masters_.push_back(master);
    for (long long s = start; s <= end; ++s) m.owner_[s] = static_cast<int16_t>(index);
  }
  return m;
}

}  // namespace osprey::redis
