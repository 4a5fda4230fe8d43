#include "worker/models/model.h"

#include <string>

namespace osprey::models {

Status CheckInputs(const Model& model, const Batch& batch, size_t num_rows, const int32_t* row_index) {
  OSPREY_RETURN_IF_ERROR(data::CheckBatchShape(batch));
  if (batch.num_dense != model.num_dense_features() || batch.num_sparse != model.num_sparse_features()) {
    return InvalidArgument("model expects " + std::to_string(model.num_dense_features()) + " dense and " +
                           std::to_string(model.num_sparse_features()) + " sparse features, batch has " +
                           std::to_string(batch.num_dense) + " and " + std::to_string(batch.num_sparse));
  }
  const size_t n = static_cast<size_t>(batch.size) * static_cast<size_t>(batch.num_sparse);
  for (size_t i = 0; i < n; ++i) {
    if (row_index[i] < 0 || static_cast<size_t>(row_index[i]) >= num_rows) {
      return InvalidArgument("row_index[" + std::to_string(i) + "] = " + std::to_string(row_index[i]) +
                             " is outside [0, " + std::to_string(num_rows) + ")");
    }
  }
  return Status::OK();
}

}  // namespace osprey::models
