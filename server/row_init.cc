#include "server/row_init.h"

#include <cmath>
#include <cstring>

#include "common/placement.h"

namespace osprey::server {
namespace {

// Uniform in [0, 1) from the top 24 bits of a 64-bit hash.
inline float UnitFloat(uint64_t h) { return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); }

}  // namespace

void InitialRowWeights(const config::InitConfig& init, uint32_t table_id, uint64_t key, int dim,
                       float* w) {
  uint64_t base = Mix64(init.seed ^ Mix64(key ^ (uint64_t{table_id} << 56)));
  if (init.type == config::InitType::kZeros) {
    std::memset(w, 0, sizeof(float) * dim);
  } else if (init.type == config::InitType::kNormal) {
    for (int i = 0; i < dim; ++i) {
      // Box-Muller from two independent hashes of (row, i).
      float u1 = UnitFloat(Mix64(base + 2 * i)) + 1e-7f;
      float u2 = UnitFloat(Mix64(base + 2 * i + 1));
      w[i] = init.scale * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
    }
  } else {
    for (int i = 0; i < dim; ++i) w[i] = init.scale * (2.0f * UnitFloat(Mix64(base + i)) - 1.0f);
  }
}

}  // namespace osprey::server
