// OptimizerConfig: the typed form of `tables[].optimizer` in a job config -- which row-wise
// optimizer a table's servers apply and its hyper-parameters. Pure data: the update rules and
// the validation of every field are in server/optim/optimizer.h (Optimizer::Make), which uses
// these types as osprey::server::OptimizerType / OptimizerConfig.
#pragma once

#include <string>

#include "common/status.h"

namespace osprey::config {

class YamlFields;

enum class OptimizerType { kSgd, kMomentum, kNesterov, kAdagrad, kAdam, kFtrl };

// Parses "sgd", "momentum", "nesterov", "adagrad", "adam" or "ftrl" (ASCII
// case-insensitive). Unknown names -> InvalidArgument listing the valid ones.
StatusOr<OptimizerType> ParseOptimizerType(const std::string& name);

// The canonical lowercase name, e.g. "adagrad"; "unknown" for a bad value.
const char* OptimizerTypeName(OptimizerType type);

// Hyper-parameters. Every field is validated by Optimizer::Make whatever the
// type, so a typo in an unused field is still reported.
struct OptimizerConfig {
  OptimizerType type = OptimizerType::kSgd;
  float lr = 0.01f;  // > 0, finite; unused by FTRL (its step size is ftrl_alpha)
  float momentum = 0.9f;  // [0, 1); momentum and nesterov
  float initial_accumulator = 0.1f;  // >= 0; adagrad's accumulator at row creation
  float eps = 1e-8f;  // > 0; adagrad and adam denominators
  float beta1 = 0.9f, beta2 = 0.999f;  // [0, 1); adam
  // FTRL-proximal (McMahan et al. 2013, Algorithm 1): alpha > 0; beta, l1, l2 >= 0.
  float ftrl_alpha = 0.05f, ftrl_beta = 1.0f, ftrl_l1 = 0.0f, ftrl_l2 = 0.0f;
  // >= 0. sgd, momentum, nesterov, adagrad, ftrl: L2 coupled into the gradient,
  // g += weight_decay * w (after clipping, as torch.optim does). adam: decoupled
  // (AdamW, Loshchilov & Hutter): w *= 1 - lr' * weight_decay before the Adam
  // update, the gradient is left alone.
  float weight_decay = 0.0f;
  float clip_value = 0.0f;  // >= 0; 0 = off; clamp each gradient element to [-v, v]
  float clip_norm = 0.0f;   // >= 0; 0 = off; scale the row's gradient to L2 norm <= c
};

// Reads an `optimizer` mapping into *o (ranges as configs/local.yaml documents them).
void ParseOptimizer(YamlFields& f, OptimizerConfig* o);

}  // namespace osprey::config
