#include "server/migration/moved_rows.h"

#include <algorithm>

#include "common/placement.h"

namespace osprey::server::migration {
namespace {

constexpr size_t kBatch = 4096;  // owners computed this many keys at a time

MovePlan NewPlan(int self, int to_servers) {
  MovePlan plan;
  plan.by_dest.resize(static_cast<size_t>(std::max(to_servers, self + 1)));
  return plan;
}

void Assign(MovePlan* plan, int self, uint64_t key, int owner) {
  if (owner == self) {
    ++plan->kept;
  } else {
    plan->by_dest[static_cast<size_t>(owner)].push_back(key);
  }
}

}  // namespace

size_t MovePlan::moved() const {
  size_t n = 0;
  for (const auto& d : by_dest) n += d.size();
  return n;
}

MovePlan PlanKeyMoves(uint32_t table, const uint64_t* keys, size_t n, int self, int to_servers) {
  MovePlan plan = NewPlan(self, to_servers);
  std::vector<int32_t> owners(std::min(n, kBatch));
  for (size_t begin = 0; begin < n; begin += kBatch) {
    const size_t len = std::min(kBatch, n - begin);
    ServersForKeys(table, keys + begin, len, to_servers, owners.data());
    for (size_t i = 0; i < len; ++i) Assign(&plan, self, keys[begin + i], owners[i]);
  }
  return plan;
}

std::vector<uint64_t> OwnedChunks(uint32_t table, uint64_t num_chunks, int rank, int servers) {
  std::vector<uint64_t> owned;
  for (uint64_t c = 0; c < num_chunks; ++c) {
    if (ServerForChunk(table, c, servers) == rank) owned.push_back(c);
  }
  return owned;
}

}  // namespace osprey::server::migration
