// GpuDlrm's host conveniences: host arguments staged through grow-only device buffers on the
// object's own stream, one synchronization at the end.
#include <string>

#include "worker/cuda/dlrm/gpu_dlrm_impl.h"

namespace osprey::cuda {
namespace {

// Grows *buffer to at least `bytes` (contents are not kept). Freeing an old buffer cannot race
// with earlier work on it: every host call ends with a synchronization, and cudaFree waits for
// the device besides.
Status Reserve(DeviceBuffer* buffer, size_t bytes) {
  if (buffer->size() >= bytes) return Status::OK();
  *buffer = DeviceBuffer();  // free first: the old and the new buffer need not fit together
  OSPREY_ASSIGN_OR_RETURN(*buffer, DeviceBuffer::Allocate(bytes));
  return Status::OK();
}

Status CopyIn(DeviceBuffer* dst, const void* src, size_t bytes, cudaStream_t stream) {
  OSPREY_RETURN_IF_ERROR(Reserve(dst, bytes));
  if (bytes > 0) OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->data(), src, bytes, cudaMemcpyHostToDevice, stream));
  return Status::OK();
}

Status CopyOut(void* dst, const DeviceBuffer& src, size_t bytes, cudaStream_t stream) {
  if (bytes > 0) OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src.data(), bytes, cudaMemcpyDeviceToHost, stream));
  return Status::OK();
}

// models::CheckInputs for a model we only have the config of, plus the batch limit and the host
// pointers the call will read or write.
Status CheckHostInputs(const GpuDlrm::Impl& m, const data::Batch& batch, size_t num_rows, const float* dense_params,
                       const float* rows, const int32_t* row_index) {
  OSPREY_RETURN_IF_ERROR(data::CheckBatchShape(batch));
  if (batch.num_dense != m.config.num_dense || batch.num_sparse != m.config.num_sparse) {
    return InvalidArgument("GpuDlrm: model expects " + std::to_string(m.config.num_dense) + " dense and " +
                           std::to_string(m.config.num_sparse) + " sparse features, batch has " +
                           std::to_string(batch.num_dense) + " and " + std::to_string(batch.num_sparse));
  }
  if (batch.size > m.max_batch) {
    return InvalidArgument("GpuDlrm: batch " + std::to_string(batch.size) + " is outside [0, max_batch " +
                           std::to_string(m.max_batch) + "]");
  }
  const size_t entries = static_cast<size_t>(batch.size) * static_cast<size_t>(batch.num_sparse);
  const bool any = batch.size > 0;
  if ((any && m.num_params > 0 && dense_params == nullptr) || (entries > 0 && row_index == nullptr) ||
      (num_rows > 0 && rows == nullptr)) {
    return InvalidArgument("GpuDlrm: null dense_params, rows or row_index");
  }
  for (size_t i = 0; i < entries; ++i) {
    if (row_index[i] < 0 || static_cast<size_t>(row_index[i]) >= num_rows) {
      return InvalidArgument("GpuDlrm: row_index[" + std::to_string(i) + "] = " + std::to_string(row_index[i]) +
                             " is outside [0, " + std::to_string(num_rows) + ")");
    }
  }
  return Status::OK();
}

}  // namespace

Status GpuDlrm::ForwardBackwardHost(const float* dense_params, const float* rows, size_t num_rows,
                                    const int32_t* row_index, const data::Batch& batch, float* dense_grad,
                                    float* row_grad, float* probs, float* loss) {
  Impl& m = *impl_;
  OSPREY_RETURN_IF_ERROR(CheckHostInputs(m, batch, num_rows, dense_params, rows, row_index));
  const size_t n = static_cast<size_t>(batch.size);
  const size_t param_bytes = sizeof(float) * m.num_params;
  const size_t row_bytes = sizeof(float) * num_rows * static_cast<size_t>(m.config.embedding_dim);
  if ((param_bytes > 0 && dense_grad == nullptr) || (row_bytes > 0 && row_grad == nullptr) ||
      (n > 0 && probs == nullptr) || loss == nullptr) {
    return InvalidArgument("GpuDlrm: null dense_grad, row_grad, probs or loss");
  }
  ScopedDevice scope;
  OSPREY_RETURN_IF_ERROR(scope.Enter(m.device));
  const cudaStream_t s = m.host_stream;
  Impl::Staging& st = m.staging;
  OSPREY_RETURN_IF_ERROR(CopyIn(&st.params, dense_params, param_bytes, s));
  OSPREY_RETURN_IF_ERROR(CopyIn(&st.rows, rows, row_bytes, s));
  OSPREY_RETURN_IF_ERROR(CopyIn(&st.row_index, row_index, sizeof(int32_t) * n * batch.num_sparse, s));
  OSPREY_RETURN_IF_ERROR(CopyIn(&st.dense, batch.dense.data(), sizeof(float) * batch.dense.size(), s));
  OSPREY_RETURN_IF_ERROR(CopyIn(&st.labels, batch.labels.data(), sizeof(float) * n, s));
  OSPREY_RETURN_IF_ERROR(Reserve(&st.dense_grad, param_bytes));
  OSPREY_RETURN_IF_ERROR(Reserve(&st.row_grad, row_bytes));
  OSPREY_RETURN_IF_ERROR(Reserve(&st.probs, sizeof(float) * n));
  OSPREY_RETURN_IF_ERROR(Reserve(&st.loss, sizeof(float)));
  OSPREY_RETURN_IF_ERROR(ForwardBackward(st.params.as<float>(), st.rows.as<float>(), num_rows,
                                         st.row_index.as<int32_t>(), st.dense.as<float>(), st.labels.as<float>(),
                                         batch.size, st.dense_grad.as<float>(), st.row_grad.as<float>(),
                                         st.probs.as<float>(), st.loss.as<float>(), s));
  OSPREY_RETURN_IF_ERROR(CopyOut(dense_grad, st.dense_grad, param_bytes, s));
  OSPREY_RETURN_IF_ERROR(CopyOut(row_grad, st.row_grad, row_bytes, s));
  OSPREY_RETURN_IF_ERROR(CopyOut(probs, st.probs, sizeof(float) * n, s));
  OSPREY_RETURN_IF_ERROR(CopyOut(loss, st.loss, sizeof(float), s));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return Status::OK();
}

Status GpuDlrm::PredictHost(const float* dense_params, const float* rows, size_t num_rows, const int32_t* row_index,
                            const data::Batch& batch, float* probs) {
  Impl& m = *impl_;
  OSPREY_RETURN_IF_ERROR(CheckHostInputs(m, batch, num_rows, dense_params, rows, row_index));
  const size_t n = static_cast<size_t>(batch.size);
  if (n == 0) return Status::OK();
  if (probs == nullptr) return InvalidArgument("GpuDlrm: null probs");
  ScopedDevice scope;
  OSPREY_RETURN_IF_ERROR(scope.Enter(m.device));
  const cudaStream_t s = m.host_stream;
  Impl::Staging& st = m.staging;
  OSPREY_RETURN_IF_ERROR(CopyIn(&st.params, dense_params, sizeof(float) * m.num_params, s));
  OSPREY_RETURN_IF_ERROR(
      CopyIn(&st.rows, rows, sizeof(float) * num_rows * static_cast<size_t>(m.config.embedding_dim), s));
  OSPREY_RETURN_IF_ERROR(CopyIn(&st.row_index, row_index, sizeof(int32_t) * n * batch.num_sparse, s));
  OSPREY_RETURN_IF_ERROR(CopyIn(&st.dense, batch.dense.data(), sizeof(float) * batch.dense.size(), s));
  OSPREY_RETURN_IF_ERROR(Reserve(&st.probs, sizeof(float) * n));
  OSPREY_RETURN_IF_ERROR(Predict(st.params.as<float>(), st.rows.as<float>(), num_rows, st.row_index.as<int32_t>(),
                                 st.dense.as<float>(), batch.size, st.probs.as<float>(), s));
  OSPREY_RETURN_IF_ERROR(CopyOut(probs, st.probs, sizeof(float) * n, s));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return Status::OK();
}

}  // namespace osprey::cuda
