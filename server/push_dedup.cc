#include "server/push_dedup.h"

#include <algorithm>

namespace osprey::server {

bool PushDedup::Seen(uint32_t table, int worker, uint64_t incarnation, uint64_t id) const {
  if (incarnation == 0) return false;
  auto it = workers_.find(Key(table, worker));
  if (it == workers_.end() || it->second.incarnation != incarnation) return false;
  return id <= it->second.evicted || it->second.ids.count(id) > 0;
}

PushDedup::PerWorker& PushDedup::For(uint32_t table, int worker, uint64_t incarnation) {
  PerWorker& w = workers_[Key(table, worker)];
  if (w.incarnation != incarnation) w = PerWorker{incarnation, 0, 0, {}, {}};
  return w;
}

void PushDedup::Record(uint32_t table, int worker, uint64_t incarnation, uint64_t id) {
  if (incarnation == 0) return;
  PerWorker& w = For(table, worker, incarnation);
  if (id <= w.evicted || !w.ids.insert(id).second) return;
  w.order.push_back(id);
  w.high = std::max(w.high, id);
  while (w.order.size() > window_) {
    w.evicted = std::max(w.evicted, w.order.front());
    w.ids.erase(w.order.front());
    w.order.pop_front();
  }
}

void PushDedup::Restore(uint32_t table, int worker, uint64_t incarnation, uint64_t high) {
  if (incarnation == 0) return;
  PerWorker& w = For(table, worker, incarnation);
  w.evicted = std::max(w.evicted, high);
  w.high = std::max(w.high, high);
}

uint64_t PushDedup::High(uint32_t table, int worker, uint64_t* incarnation) const {
  auto it = workers_.find(Key(table, worker));
  if (it == workers_.end()) return 0;
  if (incarnation != nullptr) *incarnation = it->second.incarnation;
  return it->second.high;
}

}  // namespace osprey::server
