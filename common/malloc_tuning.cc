#include "common/malloc_tuning.h"

#include <cstdlib>  // defines __GLIBC__ when building against glibc; test it only after this

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace osprey {

void TuneMallocForLargeMessages() {
#if defined(__GLIBC__)
  constexpr int kOneGiB = 1 << 30;
  // The arena limit only affects threads that have not allocated yet: hence "first thing in main".
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, kOneGiB);
  mallopt(M_TRIM_THRESHOLD, kOneGiB);
#endif
}

}  // namespace osprey
