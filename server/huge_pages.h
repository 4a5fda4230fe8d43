// Memory for the server's large, randomly accessed arrays (sparse rows, their hash index, merge
// buffer indexes), backed by transparent huge pages where the kernel offers them.
//
// A sparse push touches rows spread over gigabytes: with 4 KiB pages nearly every row costs a TLB
// miss and a page walk on top of its cache misses. Allocations of at least kHugePageBytes are
// aligned to 2 MiB and madvise(MADV_HUGEPAGE)d before first touch, so the kernel backs them with
// 2 MiB pages when THP is "always" or "madvise"; with THP off (or off Linux) they are ordinary
// pages, same contents, only slower. Small allocations use operator new.
//
// Thread-safety: pure functions, like malloc.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace osprey::server {

constexpr size_t kHugePageBytes = size_t{2} << 20;

// Uninitialized memory for `bytes` bytes; free with HugeFree(p, bytes). Throws std::bad_alloc.
inline void* HugeAlloc(size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new(bytes);
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  (void)madvise(p, rounded, MADV_HUGEPAGE);  // advisory: failure leaves normal pages
#endif
  return p;
}

inline void HugeFree(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes < kHugePageBytes) {
    ::operator delete(p);
  } else {
    std::free(p);
  }
}

// std::allocator replacement for vectors of that size (std::vector<T, HugePageAllocator<T>>).
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator
  T* allocate(size_t n) { return static_cast<T*>(HugeAlloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { HugeFree(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const { return false; }
};

// Deleter of a unique_ptr<T[]> holding `bytes` from HugeAlloc.
struct HugeDeleter {
  size_t bytes = 0;
  void operator()(void* p) const { HugeFree(p, bytes); }
};

}  // namespace osprey::server
