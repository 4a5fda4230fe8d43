// Whether an array of floats holds any NaN or infinity: the check the server runs on every pushed
// gradient (non_finite policy) and the client on a push it is about to send in parts.
// Thread-safety: a pure function.
#pragma once

#include <cstddef>

namespace osprey {

// True when no element of g[0, n) is NaN or +-Inf; stops early on long arrays.
bool AllFiniteFloats(const float* g, size_t n);

}  // namespace osprey
