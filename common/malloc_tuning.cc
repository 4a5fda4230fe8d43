#include "common/malloc_tuning.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace osprey {

void TuneMallocForLargeMessages() {
#if defined(__GLIBC__)
  constexpr int kOneGiB = 1 << 30;
  // Order matters little, but the arena limit must be in place before other threads allocate.
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, kOneGiB);
  mallopt(M_TRIM_THRESHOLD, kOneGiB);
#endif
}

}  // namespace osprey
