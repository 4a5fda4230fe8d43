#include "server/optim/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

// Debian builds for baseline x86-64 (SSE2). target_clones compiles each loop
// again for AVX-512 and AVX2 and picks one clone at load time, through an
// ifunc, so servers on modern CPUs get 16- or 8-wide vectors without a -march
// flag (AVX-512: Adagrad dim 64 +8-13% on the 2-core VM, its sqrt and divide
// bound). The build sets -ffp-contract=off so no clone fuses into FMA, and the
// loops are element-wise (no reduction is reordered): every clone, and any two
// servers, produce bit-identical weights.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define OSPREY_OPTIM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OSPREY_OPTIM_CLONES
#endif

#define OSPREY_RESTRICT __restrict__

namespace osprey::server::optim_internal {
namespace {

// Written as compares rather than std::clamp so that a NaN gradient stays NaN
// (visible to the caller) and the loop vectorizes into min/max instructions.
inline float Prep(float g, float w, const GradPrep& p) {
  g = g * p.pre;
  g = g < -p.clip ? -p.clip : g;
  g = g > p.clip ? p.clip : g;
  return g * p.scale + p.wd * w;
}

}  // namespace

OSPREY_OPTIM_CLONES
void SgdLoop(float* OSPREY_RESTRICT w, const float* OSPREY_RESTRICT g, size_t n, GradPrep p,
             float lr) {
  for (size_t i = 0; i < n; ++i) w[i] -= lr * Prep(g[i], w[i], p);
}

OSPREY_OPTIM_CLONES
void MomentumLoop(float* OSPREY_RESTRICT w, float* OSPREY_RESTRICT v,
                  const float* OSPREY_RESTRICT g, size_t n, GradPrep p, float lr, float mu) {
  for (size_t i = 0; i < n; ++i) {
    float vi = mu * v[i] + Prep(g[i], w[i], p);
    v[i] = vi;
    w[i] -= lr * vi;
  }
}

OSPREY_OPTIM_CLONES
void NesterovLoop(float* OSPREY_RESTRICT w, float* OSPREY_RESTRICT v,
                  const float* OSPREY_RESTRICT g, size_t n, GradPrep p, float lr, float mu) {
  for (size_t i = 0; i < n; ++i) {
    float gi = Prep(g[i], w[i], p);
    float vi = mu * v[i] + gi;
    v[i] = vi;
    w[i] -= lr * (gi + mu * vi);
  }
}

OSPREY_OPTIM_CLONES
void AdagradLoop(float* OSPREY_RESTRICT w, float* OSPREY_RESTRICT acc,
                 const float* OSPREY_RESTRICT g, size_t n, GradPrep p, float lr, float eps) {
  for (size_t i = 0; i < n; ++i) {
    float gi = Prep(g[i], w[i], p);
    float ai = acc[i] + gi * gi;
    acc[i] = ai;
    w[i] -= lr * gi / (std::sqrt(ai) + eps);
  }
}

// Same operation order as torch.optim.Adam(W) so results can be compared:
// denom = sqrt(v) / sqrt(bc2) + eps; w -= (lr / bc1) * m / denom.
OSPREY_OPTIM_CLONES
void AdamLoop(float* OSPREY_RESTRICT w, float* OSPREY_RESTRICT m, float* OSPREY_RESTRICT v,
              const float* OSPREY_RESTRICT g, size_t n, GradPrep p, const AdamStep& s) {
  const float b1 = s.b1, b2 = s.b2, one_b1 = 1.0f - s.b1, one_b2 = 1.0f - s.b2;
  const float step_size = s.step_size, bc2_sqrt = s.bc2_sqrt, eps = s.eps, decay = s.decay;
  for (size_t i = 0; i < n; ++i) {
    float gi = Prep(g[i], w[i], p);
    float mi = b1 * m[i] + one_b1 * gi;
    float vi = b2 * v[i] + one_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

OSPREY_OPTIM_CLONES
void FtrlLoop(float* OSPREY_RESTRICT w, float* OSPREY_RESTRICT z, float* OSPREY_RESTRICT nacc,
              const float* OSPREY_RESTRICT g, size_t n, GradPrep p, const FtrlParams& f) {
  // Dividing by alpha twice per element would make FTRL the slowest loop;
  // one reciprocal per row leaves a single division per element.
  const float inv_alpha = static_cast<float>(1.0 / f.alpha);
  const float beta = f.beta, l1 = f.l1, l2 = f.l2;
  for (size_t i = 0; i < n; ++i) {
    float wi = w[i];
    float gi = Prep(g[i], wi, p);
    float ni = nacc[i];
    float n_new = ni + gi * gi;
    float sqrt_new = std::sqrt(n_new);
    float sigma = (sqrt_new - std::sqrt(ni)) * inv_alpha;
    float zi = z[i] + (gi - sigma * wi);
    z[i] = zi;
    nacc[i] = n_new;
    float denom = (beta + sqrt_new) * inv_alpha + l2;
    // Branch-free so it vectorizes (the build passes -fno-trapping-math, else
    // GCC refuses to if-convert the FP ops of one side). Sparse lanes compute
    // +0 / 1, so no lane ever divides by a 0 denominator, which happens only
    // when beta = l2 = n = 0; w is 0 there too.
    const bool sparse = (std::fabs(zi) <= l1) | !(denom > 0.0f);
    const float num = sparse ? 0.0f : std::copysign(l1, zi) - zi;
    w[i] = num / (sparse ? 1.0f : denom);
  }
}

// Eight independent partial sums: a single float accumulator would not
// vectorize (FP addition is not associative) and would lose precision.
OSPREY_OPTIM_CLONES
double SumSquaresClamped(const float* OSPREY_RESTRICT g, size_t n, float pre, float clip) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) {
      float x = std::min(std::max(g[i + j] * pre, -clip), clip);
      part[j] += x * x;
    }
  }
  double sum = 0.0;
  for (; i < n; ++i) {
    double x = std::min(std::max(g[i] * pre, -clip), clip);
    sum += x * x;
  }
  for (float s : part) sum += s;
  return sum;
}

}  // namespace osprey::server::optim_internal
