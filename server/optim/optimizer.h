// Row-wise optimizers that the parameter server applies to merged gradients.
//
// A sparse table stores each row as `dim` weights immediately followed by
// `state_floats(dim)` floats of optimizer state; the server calls Apply once
// per row with the row's merged gradient. A dense table is cut into chunks and
// Apply is called once per chunk with dim = chunk length, so every "per row"
// rule below (clip by norm, Adam's step count) is per chunk for dense tables.
//
// One Apply call is one optimizer step. It never allocates, never fails and
// dispatches once on the optimizer type to a vectorized per-element loop.
// Gradients are assumed finite: callers run AllFinite() first and apply their
// non-finite policy (Apply with a NaN gradient writes NaN into the row).
//
// Gradient pipeline of one step, for every optimizer:
//   0. g *= grad_scale                                    (ApplyOptions; 1 by default)
//   1. g  = clamp(g, -clip_value, clip_value)             (if clip_value > 0)
//   2. g *= min(1, clip_norm / ||g||_2)  over the row     (if clip_norm > 0)
//   3. weight decay (see OptimizerConfig::weight_decay)
//   4. the optimizer's update with lr' = lr * lr_scale    (see ApplyOptions)
// The caller's gradient buffer is never written; clipping happens in registers.
//
// Results are bit-identical on every x86-64 CPU: the loops are compiled for
// AVX2 and for the baseline ISA (picked at load time), with FP contraction off
// so no clone uses FMA, and sqrt/div are correctly rounded in both (checked:
// SSE2, AVX2 and AVX-512 builds write the same bytes for every optimizer).
//
// Thread-safety: an Optimizer is immutable after Make(). All methods are const
// and may run concurrently on distinct rows; two threads must not Apply to the
// same row at once (the caller owns the row and its state).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/config/optimizer_config.h"
#include "common/status.h"

namespace osprey::server {

// The optimizer's type and hyper-parameters are pure config data (common/config/optimizer_config.h).
using config::OptimizerConfig;
using config::OptimizerType;
using config::OptimizerTypeName;
using config::ParseOptimizerType;

// Per-apply modifiers computed by the server's staleness policies.
struct ApplyOptions {
  // Multiplies lr (and AdamW's decay, which is lr' * weight_decay). FTRL has
  // no lr: there the gradient is multiplied by lr_scale before the update, so a
  // stale push weighs less in z and n (exact FTRL when 1). Must be finite and
  // >= 0; negative or NaN is treated as 0.
  float lr_scale = 1.0f;
  // Multiplies `momentum` for momentum and nesterov; clamped to [0, 1] so the
  // effective momentum stays below 1. Ignored by the others (Adam's bias
  // correction assumes a constant beta1).
  float momentum_scale = 1.0f;
  // Multiplies every gradient element as it is read, before clipping (step 0 of the pipeline):
  // the server's merge-window mean (1 / pushes), applied without a separate pass over the
  // merged gradients. x * 1.0f == x, so the default changes nothing, bit for bit; with f != 1
  // the result equals scaling the gradient buffer by f first.
  float grad_scale = 1.0f;
};

// The update rules, with lr' = lr * lr_scale, mu = momentum * momentum_scale
// and g the gradient after steps 1-3 of the pipeline above. State layout (the
// floats right after the row's weights):
//
//   sgd       w -= lr' g                                   state: none
//   momentum  v = mu v + g;  w -= lr' v                    state: v[dim]
//   nesterov  v = mu v + g;  w -= lr' (g + mu v)           state: v[dim]
//             (both as torch.optim.SGD with dampening 0)
//   adagrad   a += g^2;  w -= lr' g / (sqrt(a) + eps)      state: a[dim], starts at
//             (torch.optim.Adagrad, lr_decay 0)                   initial_accumulator
//   adam      t += 1;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//             w -= lr' / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
//             state: m[dim], v[dim], t. t is the row's own step count (rows are
//             created at different times), a uint32 stored bit-cast in one float
//             slot after v; it saturates at 2^32-1. Copy it as bytes, never as a
//             float value. It sits last so m and v keep the row's alignment.
//   ftrl      per element, with the stored weight w:
//               sigma = (sqrt(n + g^2) - sqrt(n)) / alpha
//               z += g - sigma w;  n += g^2
//               w = 0                                          if |z| <= l1
//               w = -(z - sgn(z) l1) / ((beta + sqrt(n)) / alpha + l2)   otherwise
//             state: z[dim], n[dim], both starting at 0. The update reads the
//             stored weight (as TensorFlow's Ftrl does), so rows created with
//             non-zero initial weights are handled; from then on w is always the
//             closed form. If the denominator is 0 (beta = l2 = n = 0) w is 0.
class Optimizer {
 public:
  // Validates every field; a bad one -> InvalidArgument naming the field and
  // its value, e.g. "optimizer config: lr must be > 0 and finite, got -1".
  static StatusOr<std::unique_ptr<Optimizer>> Make(const OptimizerConfig& config);

  // Number of state floats stored right after a row of `dim` weights.
  size_t state_floats(size_t dim) const;

  // Writes the initial state of a new row: state_floats(dim) floats at `state`.
  void InitState(float* state, size_t dim) const;

  // One step on the `dim` weights at `w` with their state at `state`
  // (state_floats(dim) floats, initialized by InitState) and gradient `g`
  // (read only). `w`, `state` and `g` must not overlap. Never allocates.
  void Apply(float* w, float* state, const float* g, size_t dim, const ApplyOptions& opt) const;

  // Batched Apply over n rows of one table: rows[i] points at row i's `dim` weights, immediately
  // followed by its state; its gradient is g[i*dim .. (i+1)*dim). Options are per_row[i] when
  // per_row is not null, else `shared` for every row. Bit-identical to calling Apply on each row
  // in order (rows may repeat: a repeated row gets two steps, in order), but dispatches once per
  // call instead of once per row and prefetches the rows a few positions ahead, which is what
  // the server's sparse merge-then-apply path is bound by (rows are random in a large arena).
  void ApplyRows(float* const* rows, const float* g, size_t n, size_t dim,
                 const ApplyOptions& shared, const ApplyOptions* per_row = nullptr) const;
  // The same with row i's gradient at grads[i] (dim floats each, anywhere in memory: e.g. a merge
  // window's rows pointing into the pushes they came from). Bit-identical to the contiguous form
  // on the same gradients; prefetches the gradients along with the rows.
  void ApplyRows(float* const* rows, const float* const* grads, size_t n, size_t dim,
                 const ApplyOptions& shared, const ApplyOptions* per_row = nullptr) const;

  const OptimizerConfig& config() const { return config_; }

 private:
  explicit Optimizer(const OptimizerConfig& config);
  template <OptimizerType T>
  void ApplyTyped(float* w, float* state, const float* g, size_t dim,
                  const ApplyOptions& opt) const;
  // Row i's gradient: gp[i] when gp is set, else g + i * dim.
  template <OptimizerType T>
  void ApplyRowsTyped(float* const* rows, const float* g, const float* const* gp, size_t n,
                      size_t dim, const ApplyOptions& shared, const ApplyOptions* per_row) const;
  void Dispatch(float* const* rows, const float* g, const float* const* gp, size_t n, size_t dim,
                const ApplyOptions& shared, const ApplyOptions* per_row) const;

  const OptimizerConfig config_;
  // log(beta1), log(beta2): Adam's per-row bias corrections 1 - beta^t are
  // computed as -expm1(t * log(beta)), cheaper per row than pow and exact
  // for small t where 1 - beta^t would cancel.
  const double log_beta1_;
  const double log_beta2_;
};

// True when none of the n floats at g is NaN or +-Inf. Vectorized; used by the
// server's non-finite gradient policy before Apply. Thread-safe.
bool AllFinite(const float* g, size_t n);

}  // namespace osprey::server
