// GpuDlrm: construction, argument checks and the host conveniences; the passes are in
// dlrm_passes.cc.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "worker/cuda/dlrm/gpu_dlrm_impl.h"

namespace osprey::cuda {
namespace {

constexpr int64_t kMaxElements = int64_t{1} << 31;  // cuBLAS dimensions and kernel indices are int

// Appends `widths` as layers after offset *offset, exactly as models::Dlrm lays them out.
void AddLayers(int in, const std::vector<int>& widths, bool relu_last, size_t* offset,
               std::vector<DenseLayer>* layers) {
  for (size_t l = 0; l < widths.size(); ++l) {
    DenseLayer layer;
    layer.in = in;
    layer.out = widths[l];
    layer.weight = *offset;
    layer.bias = *offset + static_cast<size_t>(in) * static_cast<size_t>(layer.out);
    layer.relu = relu_last || l + 1 < widths.size();
    *offset = layer.bias + static_cast<size_t>(layer.out);
    layers->push_back(layer);
    in = layer.out;
  }
}

// (i << 16) | j for 0 <= i < j < vectors, in the CPU model's order (0,1), (0,2), ..., (F-1,F).
std::vector<uint32_t> PairTable(int vectors) {
  std::vector<uint32_t> pairs;
  for (int i = 0; i < vectors; ++i) {
    for (int j = i + 1; j < vectors; ++j) pairs.push_back((static_cast<uint32_t>(i) << 16) | static_cast<uint32_t>(j));
  }
  return pairs;
}

StatusOr<DeviceBuffer> Upload(const void* host, size_t bytes) {
  OSPREY_ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(bytes));
  if (bytes > 0) OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpy(buffer.data(), host, bytes, cudaMemcpyHostToDevice));
  return buffer;
}

// One MLP's activation buffers for `batch` samples; bf16 copies (bf16 mode) of every layer's
// output but the last, which feeds no product of this MLP.
Status AllocateActs(const std::vector<DenseLayer>& layers, size_t batch, bool bf16, GpuDlrm::Impl::MlpActs* acts) {
  for (size_t l = 0; l < layers.size(); ++l) {
    const size_t count = batch * static_cast<size_t>(layers[l].out);
    OSPREY_ASSIGN_OR_RETURN(DeviceBuffer f32, DeviceBuffer::Allocate(sizeof(float) * count));
    acts->f32.push_back(std::move(f32));
    DeviceBuffer copy;
    if (bf16 && l + 1 < layers.size()) {
      OSPREY_ASSIGN_OR_RETURN(copy, DeviceBuffer::Allocate(sizeof(__nv_bfloat16) * count));
    }
    acts->bf16.push_back(std::move(copy));
  }
  return Status::OK();
}

// Device memory for max_batch samples.
Status AllocateBuffers(GpuDlrm::Impl* m) {
  const size_t batch = static_cast<size_t>(m->max_batch);
  const bool bf16 = m->bf16();
  OSPREY_RETURN_IF_ERROR(AllocateActs(m->bottom, batch, bf16, &m->buffers.bottom_acts));
  OSPREY_RETURN_IF_ERROR(AllocateActs(m->top, batch, bf16, &m->buffers.top_acts));
  int widest = m->top_ld;
  for (const auto* layers : {&m->bottom, &m->top}) {
    for (const DenseLayer& layer : *layers) widest = std::max({widest, layer.in, layer.out});
  }
  const size_t top_bytes = sizeof(float) * batch * static_cast<size_t>(m->top_ld);
  OSPREY_ASSIGN_OR_RETURN(m->buffers.top_input, DeviceBuffer::Allocate(top_bytes));
  OSPREY_ASSIGN_OR_RETURN(m->buffers.top_grad, DeviceBuffer::Allocate(top_bytes));
  OSPREY_ASSIGN_OR_RETURN(m->buffers.grad_a, DeviceBuffer::Allocate(sizeof(float) * batch * widest));
  OSPREY_ASSIGN_OR_RETURN(m->buffers.grad_b, DeviceBuffer::Allocate(sizeof(float) * batch * widest));
  if (bf16) {
    const size_t half = sizeof(__nv_bfloat16);
    GpuDlrm::Impl::Buffers& b = m->buffers;
    OSPREY_ASSIGN_OR_RETURN(b.params_bf16, DeviceBuffer::Allocate(half * m->num_params));
    OSPREY_ASSIGN_OR_RETURN(b.dense_bf16,
                            DeviceBuffer::Allocate(half * batch * static_cast<size_t>(Bf16Ld(m->config.num_dense))));
    OSPREY_ASSIGN_OR_RETURN(b.top_input_bf16,
                            DeviceBuffer::Allocate(half * batch * static_cast<size_t>(Bf16Ld(m->top_in))));
    OSPREY_ASSIGN_OR_RETURN(b.grad_bf16, DeviceBuffer::Allocate(half * batch * widest));
  }
  // Zeroed once: no pass writes the padding columns of the MLP inputs and of top_grad (nor, in
  // bf16 mode, a copy's rows past a call's n), and cuBLAS's vectorized loads can reach into them.
  // What they load there is masked off, but a NaN pattern must not be able to matter, and it
  // keeps compute-sanitizer's initcheck quiet. Synchronized: calls may use non-blocking streams.
  std::vector<const DeviceBuffer*> zero = {&m->buffers.top_input, &m->buffers.top_grad};
  if (bf16) {
    const GpuDlrm::Impl::Buffers& b = m->buffers;
    for (const auto* acts : {&b.bottom_acts.bf16, &b.top_acts.bf16}) {
      for (const DeviceBuffer& copy : *acts) zero.push_back(&copy);
    }
    zero.insert(zero.end(), {&b.params_bf16, &b.dense_bf16, &b.top_input_bf16, &b.grad_bf16});
  }
  for (const DeviceBuffer* buffer : zero) {
    if (buffer->size() > 0) OSPREY_CUDA_RETURN_IF_ERROR(cudaMemset(buffer->data(), 0, buffer->size()));
  }
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  const std::vector<float> ones(batch, 1.0f);
  OSPREY_ASSIGN_OR_RETURN(m->buffers.ones, Upload(ones.data(), sizeof(float) * batch));
  const std::vector<uint32_t> pairs = PairTable(m->config.num_sparse + 1);
  OSPREY_ASSIGN_OR_RETURN(m->buffers.pairs, Upload(pairs.data(), sizeof(uint32_t) * pairs.size()));
  return Status::OK();
}

Status RequireNonNull(const void* p, bool needed, const char* name) {
  if (needed && p == nullptr) return InvalidArgument(std::string("GpuDlrm: ") + name + " is null");
  return Status::OK();
}

constexpr MlpPrecision kPrecisions[] = {MlpPrecision::kFp32, MlpPrecision::kTf32, MlpPrecision::kBf16};

bool IsKnown(MlpPrecision precision) {
  for (MlpPrecision p : kPrecisions) {
    if (p == precision) return true;
  }
  return false;
}

}  // namespace

StatusOr<MlpPrecision> ParseMlpPrecision(const std::string& name) {
  for (MlpPrecision p : kPrecisions) {
    if (name == MlpPrecisionName(p)) return p;
  }
  return InvalidArgument("MLP precision \"" + name + "\" is not one of fp32, tf32, bf16");
}

const char* MlpPrecisionName(MlpPrecision precision) {
  switch (precision) {
    case MlpPrecision::kFp32:
      return "fp32";
    case MlpPrecision::kTf32:
      return "tf32";
    case MlpPrecision::kBf16:
      return "bf16";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<GpuDlrm>> GpuDlrm::Make(const models::DlrmConfig& config, int device, int max_batch,
                                                 const GpuDlrmOptions& options) {
  // The CPU model validates the config, and its sizes cross-check the layout built here.
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<models::Dlrm> cpu, models::Dlrm::Make(config));
  auto m = std::make_unique<Impl>();
  m->config = config;
  m->options = options;
  m->device = device;
  m->max_batch = max_batch;
  m->top_in = cpu->top_input_dim();
  m->top_ld = (m->top_in + 3) / 4 * 4;  // top_in < 2^31 - 3: ValidateDlrmConfig bounds it far below
  const int64_t vectors = config.num_sparse + 1;
  m->num_pairs = static_cast<int>(vectors * (vectors - 1) / 2);
  size_t offset = 0;
  AddLayers(config.num_dense, config.bottom_mlp, /*relu_last=*/true, &offset, &m->bottom);
  AddLayers(m->top_in, config.top_mlp, /*relu_last=*/false, &offset, &m->top);
  m->num_params = offset;
  if (m->num_params != cpu->num_dense_params()) {
    return Internal("GpuDlrm: parameter layout has " + std::to_string(m->num_params) + " floats, models::Dlrm " +
                    std::to_string(cpu->num_dense_params()));
  }
  if (!IsKnown(options.precision)) {
    return InvalidArgument("GpuDlrm: MlpPrecision " + std::to_string(static_cast<int>(options.precision)) +
                           " is not one of kFp32, kTf32, kBf16");
  }
  int64_t widest = std::max<int64_t>(m->top_ld, config.num_sparse);
  if (m->bf16()) widest = std::max<int64_t>({widest, Bf16Ld(m->top_in), Bf16Ld(config.num_dense)});
  for (const auto* layers : {&m->bottom, &m->top}) {
    for (const DenseLayer& layer : *layers) widest = std::max<int64_t>(widest, std::max(layer.in, layer.out));
  }
  if (max_batch < 1 || static_cast<int64_t>(max_batch) * widest >= kMaxElements) {
    return InvalidArgument("GpuDlrm: max_batch must be in [1, " + std::to_string(kMaxElements / widest) +
                           ") for this config, got " + std::to_string(max_batch));
  }

  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // clear the sticky error
    return FailedPrecondition(std::string("GpuDlrm: no CUDA device (cudaGetDeviceCount: ") +
                              (err == cudaSuccess ? "0 devices" : cudaGetErrorName(err)) + ")");
  }
  if (device < 0 || device >= count) {
    return InvalidArgument("GpuDlrm: CUDA device " + std::to_string(device) + " is out of range: " +
                           std::to_string(count) + " device(s) visible, valid indices [0, " + std::to_string(count) +
                           ")");
  }
  ScopedDevice scope;
  OSPREY_RETURN_IF_ERROR(scope.Enter(device));
  OSPREY_RETURN_IF_ERROR(dlrm::PrepareKernels(m->ShapeFor(0)));
  OSPREY_RETURN_IF_ERROR(AllocateBuffers(m.get()));
  OSPREY_CUBLAS_RETURN_IF_ERROR(cublasCreate(&m->blas));
  // bf16 needs no math mode: cublasGemmEx takes bf16 operands to the tensor cores under the default
  // math, and the fp32 gemv of the bias gradients stays plain fp32.
  OSPREY_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(
      m->blas, options.precision == MlpPrecision::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&m->host_stream, cudaStreamNonBlocking));
  return std::unique_ptr<GpuDlrm>(new GpuDlrm(std::move(m)));
}

GpuDlrm::Impl::~Impl() {
  // Free everything with this object's device current; errors here have nobody to report to.
  ScopedDevice scope;
  (void)scope.Enter(device);
  if (host_stream != nullptr) (void)cudaStreamSynchronize(host_stream);
  if (blas != nullptr) (void)cublasDestroy(blas);
  if (host_stream != nullptr) (void)cudaStreamDestroy(host_stream);
  buffers = Buffers();
  staging = Staging();
}

GpuDlrm::GpuDlrm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuDlrm::~GpuDlrm() = default;

size_t GpuDlrm::num_dense_params() const { return impl_->num_params; }
int GpuDlrm::top_input_dim() const { return impl_->top_in; }
int GpuDlrm::embedding_dim() const { return impl_->config.embedding_dim; }
int GpuDlrm::num_dense_features() const { return impl_->config.num_dense; }
int GpuDlrm::num_sparse_features() const { return impl_->config.num_sparse; }
int GpuDlrm::device() const { return impl_->device; }
int GpuDlrm::max_batch() const { return impl_->max_batch; }

Status GpuDlrm::ForwardBackward(const float* d_dense_params, const float* d_rows, size_t num_rows,
                                const int32_t* d_row_index, const float* d_dense_features, const float* d_labels,
                                int batch, float* d_dense_grad, float* d_row_grad, float* d_probs, float* d_loss,
                                void* stream, const BackwardHooks* hooks) {
  Impl& m = *impl_;
  if (batch < 0 || batch > m.max_batch) {
    return InvalidArgument("GpuDlrm: batch " + std::to_string(batch) + " is outside [0, max_batch " +
                           std::to_string(m.max_batch) + "]");
  }
  const bool any = batch > 0;
  const size_t row_floats = num_rows * static_cast<size_t>(m.config.embedding_dim);
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_dense_params, any && m.num_params > 0, "d_dense_params"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_rows, any && row_floats > 0, "d_rows"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_row_index, any && m.config.num_sparse > 0, "d_row_index"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_dense_features, any && m.config.num_dense > 0, "d_dense_features"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_labels, any, "d_labels"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_dense_grad, m.num_params > 0, "d_dense_grad"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_row_grad, row_floats > 0, "d_row_grad"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_probs, any, "d_probs"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_loss, true, "d_loss"));
  ScopedDevice scope;
  OSPREY_RETURN_IF_ERROR(scope.Enter(m.device));
  auto s = static_cast<cudaStream_t>(stream);
  // Rows accumulate atomically, so they start at zero; dense_grad is overwritten by the passes.
  if (row_floats > 0) OSPREY_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_row_grad, 0, sizeof(float) * row_floats, s));
  if (!any) {
    if (m.num_params > 0) {
      OSPREY_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_dense_grad, 0, sizeof(float) * m.num_params, s));
    }
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_loss, 0, sizeof(float), s));
    if (hooks != nullptr && hooks->rows_ready) hooks->rows_ready();
    if (hooks != nullptr && hooks->dense_ready) hooks->dense_ready(0);
    return Status::OK();
  }
  OSPREY_CUBLAS_RETURN_IF_ERROR(cublasSetStream(m.blas, s));
  return m.ForwardBackward(d_dense_params, d_rows, num_rows, d_row_index, d_dense_features, d_labels, batch,
                           d_dense_grad, d_row_grad, d_probs, d_loss, hooks, s);
}

Status GpuDlrm::Predict(const float* d_dense_params, const float* d_rows, size_t num_rows, const int32_t* d_row_index,
                        const float* d_dense_features, int batch, float* d_probs, void* stream) {
  Impl& m = *impl_;
  if (batch < 0 || batch > m.max_batch) {
    return InvalidArgument("GpuDlrm: batch " + std::to_string(batch) + " is outside [0, max_batch " +
                           std::to_string(m.max_batch) + "]");
  }
  if (batch == 0) return Status::OK();
  const size_t row_floats = num_rows * static_cast<size_t>(m.config.embedding_dim);
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_dense_params, m.num_params > 0, "d_dense_params"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_rows, row_floats > 0, "d_rows"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_row_index, m.config.num_sparse > 0, "d_row_index"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_dense_features, m.config.num_dense > 0, "d_dense_features"));
  OSPREY_RETURN_IF_ERROR(RequireNonNull(d_probs, true, "d_probs"));
  ScopedDevice scope;
  OSPREY_RETURN_IF_ERROR(scope.Enter(m.device));
  auto s = static_cast<cudaStream_t>(stream);
  OSPREY_CUBLAS_RETURN_IF_ERROR(cublasSetStream(m.blas, s));
  OSPREY_RETURN_IF_ERROR(m.Forward(d_dense_params, d_rows, num_rows, d_row_index, d_dense_features, batch, s));
  return dlrm::Sigmoid(m.buffers.top_acts.f32.back().as<float>(), batch, d_probs, s);
}

}  // namespace osprey::cuda
