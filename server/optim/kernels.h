// Per-element loops behind Optimizer::Apply. Internal to
// server/optim: include optimizer.h instead. The formulas and state layouts
// are documented there; here only the calling contract.
//
// Every loop takes distinct, non-overlapping arrays of n floats (restrict),
// never allocates and is compiled twice (AVX2 and baseline x86-64, chosen at
// load time through an ifunc), with identical results in both. Thread-safe on
// distinct arrays.
#pragma once

#include <cstddef>

namespace osprey::server::optim_internal {

// Gradient front end applied in registers to each element before the update:
//   g' = clamp(g * pre, -clip, clip) * scale + wd * w
// clip = +inf when clipping by value is off; scale folds clipping by norm (and
// FTRL's lr_scale); wd is the coupled L2 weight decay (0 when off or decoupled).
struct GradPrep {
  float pre;  // ApplyOptions::grad_scale (1: exact no-op)
  float clip;
  float scale;
  float wd;
};

void SgdLoop(float* w, const float* g, size_t n, GradPrep p, float lr);
void MomentumLoop(float* w, float* v, const float* g, size_t n, GradPrep p, float lr, float mu);
void NesterovLoop(float* w, float* v, const float* g, size_t n, GradPrep p, float lr, float mu);
void AdagradLoop(float* w, float* acc, const float* g, size_t n, GradPrep p, float lr, float eps);

// Constants of one Adam step, computed once per row from its step count t.
struct AdamStep {
  float b1, b2;
  float step_size;  // lr' / (1 - b1^t)
  float bc2_sqrt;   // sqrt(1 - b2^t)
  float eps;
  float decay;      // 1 - lr' * weight_decay (AdamW); 1 when off
};
void AdamLoop(float* w, float* m, float* v, const float* g, size_t n, GradPrep p, const AdamStep& s);

struct FtrlParams {
  float alpha, beta, l1, l2;
};
void FtrlLoop(float* w, float* z, float* nacc, const float* g, size_t n, GradPrep p,
              const FtrlParams& f);

// Sum over i of clamp(g[i] * pre, -clip, clip)^2, the squared norm used by clip_norm.
double SumSquaresClamped(const float* g, size_t n, float pre, float clip);

}  // namespace osprey::server::optim_internal
