// MakeModel: builds a built-in model from its plain config (the lead's YAML loader fills
// ModelConfig; nothing here reads files or the environment).
//
// Thread-safety: pure function; the returned model follows Model's rules.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "worker/models/dlrm.h"
#include "worker/models/logistic.h"
#include "worker/models/model.h"

namespace osprey::models {

struct ModelConfig {
  std::string type = "dlrm";  // "dlrm" or "lr"
  DlrmConfig dlrm;            // used when type == "dlrm"
  LogisticConfig lr;          // used when type == "lr"
};

// Returns the model, or InvalidArgument for an unknown type (the message lists the valid ones) or
// an invalid config of the chosen type.
StatusOr<std::unique_ptr<Model>> MakeModel(const ModelConfig& config);

}  // namespace osprey::models
