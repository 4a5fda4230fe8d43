#include "common/config/optimizer_config.h"

#include <algorithm>
#include <cctype>

#include "common/config/yaml_fields.h"

namespace osprey::config {
namespace {

constexpr double kHuge = 1e30;
constexpr OptimizerType kAllTypes[] = {OptimizerType::kSgd,     OptimizerType::kMomentum,
                                       OptimizerType::kNesterov, OptimizerType::kAdagrad,
                                       OptimizerType::kAdam,    OptimizerType::kFtrl};

}  // namespace

const char* OptimizerTypeName(OptimizerType type) {
  switch (type) {
    case OptimizerType::kSgd: return "sgd";
    case OptimizerType::kMomentum: return "momentum";
    case OptimizerType::kNesterov: return "nesterov";
    case OptimizerType::kAdagrad: return "adagrad";
    case OptimizerType::kAdam: return "adam";
    case OptimizerType::kFtrl: return "ftrl";
  }
  return "unknown";
}

StatusOr<OptimizerType> ParseOptimizerType(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  std::string valid;
  for (OptimizerType type : kAllTypes) {
    if (lower == OptimizerTypeName(type)) return type;
    valid += valid.empty() ? "" : ", ";
    valid += OptimizerTypeName(type);
  }
  return InvalidArgument("unknown optimizer type '" + name + "'; valid types: " + valid);
}

void ParseOptimizer(YamlFields& f, OptimizerConfig* o) {
  std::string type = OptimizerTypeName(o->type);
  f.Get("type", &type, {"sgd", "momentum", "nesterov", "adagrad", "adam", "ftrl"});
  if (f.ok()) o->type = *ParseOptimizerType(type);
  f.Get("lr", &o->lr, 0, kHuge, /*lo_open=*/true);
  f.Get("momentum", &o->momentum, 0, 0.999999);
  f.Get("initial_accumulator", &o->initial_accumulator, 0, kHuge);
  f.Get("eps", &o->eps, 0, 1, /*lo_open=*/true);
  f.Get("beta1", &o->beta1, 0, 0.999999);
  f.Get("beta2", &o->beta2, 0, 0.999999);
  f.Get("alpha", &o->ftrl_alpha, 0, kHuge, /*lo_open=*/true);
  f.Get("beta", &o->ftrl_beta, 0, kHuge);
  f.Get("l1", &o->ftrl_l1, 0, kHuge);
  f.Get("l2", &o->ftrl_l2, 0, kHuge);
  f.Get("weight_decay", &o->weight_decay, 0, kHuge);
  f.Get("clip_value", &o->clip_value, 0, kHuge);
  f.Get("clip_norm", &o->clip_norm, 0, kHuge);
}

}  // namespace osprey::config
