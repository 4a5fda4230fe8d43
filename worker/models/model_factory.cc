#include "worker/models/model_factory.h"

namespace osprey::models {

StatusOr<std::unique_ptr<Model>> MakeModel(const ModelConfig& config) {
  if (config.type == "dlrm") {
    OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<Dlrm> model, Dlrm::Make(config.dlrm));
    return std::unique_ptr<Model>(std::move(model));
  }
  if (config.type == "lr") {
    OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<LogisticRegression> model, LogisticRegression::Make(config.lr));
    return std::unique_ptr<Model>(std::move(model));
  }
  return InvalidArgument("ModelConfig.type '" + config.type + "' is unknown; valid types: dlrm, lr");
}

}  // namespace osprey::models
