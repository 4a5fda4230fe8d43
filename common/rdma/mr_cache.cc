#include "common/rdma/mr_cache.h"

#include <unistd.h>

#include <vector>

namespace osprey::rdma {

MrCache::~MrCache() {
  MutexLock lock(&mu_);
  for (auto& [start, e] : entries_) (void)verbs_->DeregisterMemory(e.mr);
}

StatusOr<MemoryRegion> MrCache::Acquire(const void* addr, size_t len,
                                        const std::shared_ptr<const void>& owner) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  MutexLock lock(&mu_);
  // The region starting at or before `a` with the highest start is the only candidate.
  auto it = entries_.upper_bound(a);
  if (it != entries_.begin()) {
    --it;
    Entry& e = it->second;
    uintptr_t s = reinterpret_cast<uintptr_t>(e.mr.addr);
    if (e.has_owner && e.owner.expired() && !e.invalid) {
      stats_.invalidations++;
      e.invalid = true;  // the memory it covered may be gone
      if (e.pins == 0) {
        (void)verbs_->DeregisterMemory(e.mr);
        lru_.erase(e.lru);
        entries_.erase(it);
        it = entries_.end();
      }
    }
    if (it != entries_.end() && !it->second.invalid && a >= s && a + len <= s + e.mr.length) {
      stats_.hits++;
      e.pins++;
      lru_.splice(lru_.begin(), lru_, e.lru);
      return e.mr;
    }
  }
  stats_.misses++;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t start = a & ~(page - 1);
  uintptr_t end = (a + len + page - 1) & ~(page - 1);
  // Cached ranges stay disjoint: a range overlapping a cached one (a buffer that grew, or one
  // being invalidated) is registered for this use only and deregistered by its Release().
  auto next = entries_.lower_bound(start);
  bool overlaps = next != entries_.end() && next->first < end;
  if (next != entries_.begin()) {
    auto prev = std::prev(next);
    overlaps |= prev->first + prev->second.mr.length > start;
  }
  if (overlaps) return verbs_->RegisterMemory(addr, len);
  OSPREY_ASSIGN_OR_RETURN(MemoryRegion mr, verbs_->RegisterMemory(
                                               reinterpret_cast<const void*>(start), end - start));
  lru_.push_front(start);
  Entry& e = entries_[start];
  e.mr = mr;
  e.pins = 1;
  e.lru = lru_.begin();
  e.has_owner = owner != nullptr;
  e.owner = owner;
  EvictLocked();
  return mr;
}

void MrCache::Release(const MemoryRegion& mr) {
  MutexLock lock(&mu_);
  auto it = entries_.find(reinterpret_cast<uintptr_t>(mr.addr));
  if (it == entries_.end() || it->second.mr.lkey != mr.lkey) {
    (void)verbs_->DeregisterMemory(mr);  // an uncached one
    return;
  }
  Entry& e = it->second;
  if (--e.pins == 0 && e.invalid) {
    (void)verbs_->DeregisterMemory(e.mr);
    lru_.erase(e.lru);
    entries_.erase(it);
    return;
  }
  EvictLocked();
}

void MrCache::Invalidate(const void* addr, size_t len) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  MutexLock lock(&mu_);
  std::vector<uintptr_t> drop;
  for (auto& [start, e] : entries_) {
    if (start < a + len && start + e.mr.length > a) drop.push_back(start);
  }
  for (uintptr_t s : drop) {
    Entry& e = entries_[s];
    stats_.invalidations++;
    if (e.pins > 0) {
      e.invalid = true;
      continue;
    }
    (void)verbs_->DeregisterMemory(e.mr);
    lru_.erase(e.lru);
    entries_.erase(s);
  }
}

void MrCache::EvictLocked() {
  auto it = lru_.end();
  while (entries_.size() > capacity_ && it != lru_.begin()) {
    --it;
    Entry& e = entries_[*it];
    if (e.pins > 0) continue;
    (void)verbs_->DeregisterMemory(e.mr);
    stats_.evictions++;
    entries_.erase(*it);
    it = lru_.erase(it);
  }
}

MrCacheStats MrCache::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

size_t MrCache::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace osprey::rdma
