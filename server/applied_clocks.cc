#include "server/applied_clocks.h"

#include <algorithm>
#include <cstring>

namespace osprey::server {

void AppliedClocks::Record(uint32_t table, int worker, uint64_t incarnation, int64_t clock) {
  auto [it, inserted] = high_.emplace(std::make_pair(table, worker), clock);
  if (!inserted) it->second = std::max(it->second, clock);
  if (incarnation != 0) pushed_by_[worker].insert(incarnation);
}

void AppliedClocks::Fence(int worker, uint64_t incarnation) {
  auto it = pushed_by_.find(worker);
  if (it == pushed_by_.end()) return;
  for (uint64_t other : it->second) {
    if (other != incarnation) barred_[worker].insert(other);
  }
}

bool AppliedClocks::Barred(int worker, uint64_t incarnation) const {
  if (incarnation == 0) return false;
  auto it = barred_.find(worker);
  return it != barred_.end() && it->second.count(incarnation) > 0;
}

int64_t AppliedClocks::Of(uint32_t table, int worker) const {
  auto it = high_.find({table, worker});
  return it == high_.end() ? kNone : it->second;
}

Buffer AppliedClocks::Encode(int worker, size_t num_tables, bool complete) const {
  std::vector<int64_t> words(num_tables + 1);
  words[0] = complete ? 1 : 0;
  for (size_t t = 0; t < num_tables; ++t) words[1 + t] = Of(static_cast<uint32_t>(t), worker);
  return Buffer::Copy(words.data(), words.size() * sizeof(int64_t));
}

}  // namespace osprey::server
