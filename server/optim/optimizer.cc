#include "server/optim/optimizer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/all_finite.h"
#include "server/optim/kernels.h"

namespace osprey::server {
namespace {

using optim_internal::GradPrep;

std::string FormatFloat(float v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(v));
  return buf;
}

// The checks are written so that NaN fails them: every comparison with NaN is false.
Status CheckField(bool ok, const char* field, const char* rule, float value) {
  if (ok) return Status::OK();
  return InvalidArgument(std::string("optimizer config: ") + field + " must be " + rule + ", got " +
                         FormatFloat(value));
}

Status CheckPositive(const char* field, float v) {
  return CheckField(v > 0.0f && std::isfinite(v), field, "> 0 and finite", v);
}
Status CheckNonNegative(const char* field, float v) {
  return CheckField(v >= 0.0f && std::isfinite(v), field, ">= 0 and finite", v);
}
Status CheckUnitInterval(const char* field, float v) {
  return CheckField(v >= 0.0f && v < 1.0f, field, "in [0, 1)", v);
}

Status Validate(const OptimizerConfig& c) {
  if (std::string(OptimizerTypeName(c.type)) == "unknown") {
    return InvalidArgument("optimizer config: type has unknown value " +
                           std::to_string(static_cast<int>(c.type)));
  }
  OSPREY_RETURN_IF_ERROR(CheckPositive("lr", c.lr));
  OSPREY_RETURN_IF_ERROR(CheckUnitInterval("momentum", c.momentum));
  OSPREY_RETURN_IF_ERROR(CheckNonNegative("initial_accumulator", c.initial_accumulator));
  OSPREY_RETURN_IF_ERROR(CheckPositive("eps", c.eps));
  OSPREY_RETURN_IF_ERROR(CheckUnitInterval("beta1", c.beta1));
  OSPREY_RETURN_IF_ERROR(CheckUnitInterval("beta2", c.beta2));
  OSPREY_RETURN_IF_ERROR(CheckPositive("ftrl_alpha", c.ftrl_alpha));
  OSPREY_RETURN_IF_ERROR(CheckNonNegative("ftrl_beta", c.ftrl_beta));
  OSPREY_RETURN_IF_ERROR(CheckNonNegative("ftrl_l1", c.ftrl_l1));
  OSPREY_RETURN_IF_ERROR(CheckNonNegative("ftrl_l2", c.ftrl_l2));
  OSPREY_RETURN_IF_ERROR(CheckNonNegative("weight_decay", c.weight_decay));
  OSPREY_RETURN_IF_ERROR(CheckNonNegative("clip_value", c.clip_value));
  OSPREY_RETURN_IF_ERROR(CheckNonNegative("clip_norm", c.clip_norm));
  return Status::OK();
}

// Adam's step count lives bit-cast in one float slot (see optimizer.h).
uint32_t LoadStep(const float* slot) {
  uint32_t t;
  std::memcpy(&t, slot, sizeof(t));
  return t;
}
void StoreStep(float* slot, uint32_t t) { std::memcpy(slot, &t, sizeof(t)); }

// Steps 1-3 of the gradient pipeline, reduced to three scalars for the loops.
// Only clip_norm reads the gradient here (one extra pass over the row).
GradPrep MakeGradPrep(const OptimizerConfig& c, const float* g, size_t dim, bool coupled_decay,
                      float pre) {
  GradPrep p;
  p.pre = pre;
  p.clip = c.clip_value > 0.0f ? c.clip_value : std::numeric_limits<float>::infinity();
  p.scale = 1.0f;
  if (c.clip_norm > 0.0f) {
    const double norm = std::sqrt(optim_internal::SumSquaresClamped(g, dim, p.pre, p.clip));
    if (norm > c.clip_norm) p.scale = static_cast<float>(c.clip_norm / norm);
  }
  p.wd = coupled_decay ? c.weight_decay : 0.0f;
  return p;
}

}  // namespace

Optimizer::Optimizer(const OptimizerConfig& config)
    : config_(config),
      log_beta1_(std::log(static_cast<double>(config.beta1))),
      log_beta2_(std::log(static_cast<double>(config.beta2))) {}

StatusOr<std::unique_ptr<Optimizer>> Optimizer::Make(const OptimizerConfig& config) {
  OSPREY_RETURN_IF_ERROR(Validate(config));
  return std::unique_ptr<Optimizer>(new Optimizer(config));
}

size_t Optimizer::state_floats(size_t dim) const {
  switch (config_.type) {
    case OptimizerType::kSgd: return 0;
    case OptimizerType::kMomentum:
    case OptimizerType::kNesterov:
    case OptimizerType::kAdagrad: return dim;
    case OptimizerType::kAdam: return 2 * dim + 1;
    case OptimizerType::kFtrl: return 2 * dim;
  }
  return 0;
}

void Optimizer::InitState(float* state, size_t dim) const {
  const size_t n = state_floats(dim);
  const float fill = config_.type == OptimizerType::kAdagrad ? config_.initial_accumulator : 0.0f;
  std::fill(state, state + n, fill);
  if (config_.type == OptimizerType::kAdam) StoreStep(state + 2 * dim, 0);
}

// One step of optimizer type T: the body of Apply, shared by ApplyRows so that the batched path
// runs the very same instructions (bit-identical results).
template <OptimizerType T>
void Optimizer::ApplyTyped(float* w, float* state, const float* g, size_t dim,
                           const ApplyOptions& opt) const {
  using namespace optim_internal;  // NOLINT: the loops, local to this function
  const OptimizerConfig& c = config_;
  // `!(x > 0)` also maps NaN to 0, as documented for ApplyOptions.
  const float lr_scale = opt.lr_scale > 0.0f ? opt.lr_scale : 0.0f;
  const float mom_scale = opt.momentum_scale > 0.0f ? std::min(opt.momentum_scale, 1.0f) : 0.0f;
  const float lr = c.lr * lr_scale;
  const float mu = c.momentum * mom_scale;
  constexpr bool kCoupledDecay = T != OptimizerType::kAdam;
  GradPrep p = MakeGradPrep(c, g, dim, kCoupledDecay, opt.grad_scale);

  if constexpr (T == OptimizerType::kSgd) {
    SgdLoop(w, g, dim, p, lr);
  } else if constexpr (T == OptimizerType::kMomentum) {
    MomentumLoop(w, state, g, dim, p, lr, mu);
  } else if constexpr (T == OptimizerType::kNesterov) {
    NesterovLoop(w, state, g, dim, p, lr, mu);
  } else if constexpr (T == OptimizerType::kAdagrad) {
    AdagradLoop(w, state, g, dim, p, lr, c.eps);
  } else if constexpr (T == OptimizerType::kAdam) {
    uint32_t t = LoadStep(state + 2 * dim);
    if (t != UINT32_MAX) ++t;
    StoreStep(state + 2 * dim, t);
    // Bias corrections 1 - beta^t in double; see log_beta1_. beta = 0 gives
    // log = -inf and a correction of exactly 1.
    const double bc1 = -std::expm1(t * log_beta1_);
    const double bc2 = -std::expm1(t * log_beta2_);
    AdamStep s;
    s.b1 = c.beta1;
    s.b2 = c.beta2;
    s.step_size = static_cast<float>(lr / bc1);
    s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    s.eps = c.eps;
    s.decay = 1.0f - lr * c.weight_decay;
    AdamLoop(w, state, state + dim, g, dim, p, s);
  } else {
    // FTRL has no lr: lr_scale scales the whole gradient, decay term included.
    p.scale *= lr_scale;
    p.wd *= lr_scale;
    FtrlLoop(w, state, state + dim, g, dim, p,
             FtrlParams{c.ftrl_alpha, c.ftrl_beta, c.ftrl_l1, c.ftrl_l2});
  }
}

void Optimizer::Apply(float* w, float* state, const float* g, size_t dim,
                      const ApplyOptions& opt) const {
  switch (config_.type) {
    case OptimizerType::kSgd: return ApplyTyped<OptimizerType::kSgd>(w, state, g, dim, opt);
    case OptimizerType::kMomentum:
      return ApplyTyped<OptimizerType::kMomentum>(w, state, g, dim, opt);
    case OptimizerType::kNesterov:
      return ApplyTyped<OptimizerType::kNesterov>(w, state, g, dim, opt);
    case OptimizerType::kAdagrad:
      return ApplyTyped<OptimizerType::kAdagrad>(w, state, g, dim, opt);
    case OptimizerType::kAdam: return ApplyTyped<OptimizerType::kAdam>(w, state, g, dim, opt);
    case OptimizerType::kFtrl: return ApplyTyped<OptimizerType::kFtrl>(w, state, g, dim, opt);
  }
}

template <OptimizerType T>
void Optimizer::ApplyRowsTyped(float* const* rows, const float* g, const float* const* gp, size_t n,
                               size_t dim, const ApplyOptions& shared,
                               const ApplyOptions* per_row) const {
  // Rows are scattered over the arena: each one is a run of cache misses that the hardware
  // prefetcher cannot predict. Ask for row i + kRowsAhead (every line of weights and state, for
  // writing) while row i is computed, so its misses overlap this row's arithmetic. Gradients
  // given by pointer (gp) may be scattered too: their lines are asked for as well, and from
  // further ahead, since each row then waits on two independent misses (measured on the server
  // bench: 6 beats 3 there, 3 stays best for contiguous gradients).
  const size_t kRowsAhead = gp != nullptr ? 6 : 3;
  const size_t row_bytes = (dim + state_floats(dim)) * sizeof(float);
  const size_t grad_bytes = dim * sizeof(float);
  auto prefetch = [&](size_t i) {
    const char* r = reinterpret_cast<const char*>(rows[i]);
    for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(r + b, 1, 3);
    if (gp != nullptr) {
      const char* q = reinterpret_cast<const char*>(gp[i]);
      for (size_t b = 0; b < grad_bytes; b += 64) __builtin_prefetch(q + b, 0, 3);
    }
  };
  for (size_t i = 0; i < std::min(n, kRowsAhead); ++i) prefetch(i);
  for (size_t i = 0; i < n; ++i) {
    if (i + kRowsAhead < n) prefetch(i + kRowsAhead);
    ApplyTyped<T>(rows[i], rows[i] + dim, gp != nullptr ? gp[i] : g + i * dim, dim,
                  per_row ? per_row[i] : shared);
  }
}

void Optimizer::Dispatch(float* const* rows, const float* g, const float* const* gp, size_t n,
                         size_t dim, const ApplyOptions& shared,
                         const ApplyOptions* per_row) const {
  switch (config_.type) {
    case OptimizerType::kSgd:
      return ApplyRowsTyped<OptimizerType::kSgd>(rows, g, gp, n, dim, shared, per_row);
    case OptimizerType::kMomentum:
      return ApplyRowsTyped<OptimizerType::kMomentum>(rows, g, gp, n, dim, shared, per_row);
    case OptimizerType::kNesterov:
      return ApplyRowsTyped<OptimizerType::kNesterov>(rows, g, gp, n, dim, shared, per_row);
    case OptimizerType::kAdagrad:
      return ApplyRowsTyped<OptimizerType::kAdagrad>(rows, g, gp, n, dim, shared, per_row);
    case OptimizerType::kAdam:
      return ApplyRowsTyped<OptimizerType::kAdam>(rows, g, gp, n, dim, shared, per_row);
    case OptimizerType::kFtrl:
      return ApplyRowsTyped<OptimizerType::kFtrl>(rows, g, gp, n, dim, shared, per_row);
  }
}

void Optimizer::ApplyRows(float* const* rows, const float* g, size_t n, size_t dim,
                          const ApplyOptions& shared, const ApplyOptions* per_row) const {
  Dispatch(rows, g, nullptr, n, dim, shared, per_row);
}

void Optimizer::ApplyRows(float* const* rows, const float* const* grads, size_t n, size_t dim,
                          const ApplyOptions& shared, const ApplyOptions* per_row) const {
  Dispatch(rows, nullptr, grads, n, dim, shared, per_row);
}

bool AllFinite(const float* g, size_t n) { return AllFiniteFloats(g, n); }

}  // namespace osprey::server
