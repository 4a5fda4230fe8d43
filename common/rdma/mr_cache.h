// MrCache: memory registrations keyed by address range, so that buffers a process sends from
// again and again (the client's pinned staging buffers, the server's row arenas) are registered
// once. A lookup that falls inside a cached region is a hit; a miss registers the range (widened
// to whole pages). At most `capacity` regions are kept; past it the least recently used region
// that no in-flight work request uses is deregistered. Invalidate() drops the regions overlapping
// a range that is being freed, and a region whose owner (see Acquire) has gone is never reused (a region in use is deregistered when its last user releases it).
//
// Thread-safety: thread-safe. The cache keeps its Verbs alive (received buffers that outlive the
// transport invalidate their regions when freed).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>

#include "common/mutex.h"
#include "common/rdma/verbs.h"

namespace osprey::rdma {

struct MrCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t invalidations = 0;
};

class MrCache {
 public:
  MrCache(std::shared_ptr<Verbs> verbs, size_t capacity)
      : verbs_(std::move(verbs)), capacity_(capacity) {}
  ~MrCache();  // deregisters everything

  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // The region covering [addr, addr+len), pinned until Release(mr) (one Release per Acquire).
  // `owner` (a Buffer's owner): the cached region is trusted only while it lives -- once it has
  // expired the memory may have been freed and remapped, so the region is registered afresh.
  StatusOr<MemoryRegion> Acquire(const void* addr, size_t len,
                                 const std::shared_ptr<const void>& owner = nullptr);
  void Release(const MemoryRegion& mr);
  // Forgets every region overlapping [addr, addr+len): the memory is about to be freed.
  void Invalidate(const void* addr, size_t len);

  MrCacheStats stats() const;
  size_t size() const;

 private:
  struct Entry {
    MemoryRegion mr;
    int pins = 0;
    bool invalid = false;
    bool has_owner = false;
    std::weak_ptr<const void> owner;
    std::list<uintptr_t>::iterator lru;  // position in lru_ (front = most recent)
  };
  void EvictLocked() REQUIRES(mu_);

  const std::shared_ptr<Verbs> verbs_;
  const size_t capacity_;
  mutable Mutex mu_;
  std::map<uintptr_t, Entry> entries_ GUARDED_BY(mu_);  // by start address
  std::list<uintptr_t> lru_ GUARDED_BY(mu_);
  MrCacheStats stats_ GUARDED_BY(mu_);
};

}  // namespace osprey::rdma
