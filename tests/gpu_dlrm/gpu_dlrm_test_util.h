// Helpers of the GpuDlrm tests: skip without a device, run a Problem through the CPU model (or the
// bf16 reference) and through GpuDlrm's device API (outputs poisoned with NaN first, so an
// element the GPU never writes fails), and compare the two.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "tests/gpu_dlrm/bf16_reference.h"
#include "tests/gpu_dlrm/dlrm_problem.h"
#include "tests/testing/cuda_buffers.h"
#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/dlrm/gpu_dlrm.h"

// Every GPU test starts with this: on a machine without a device the test is skipped, not failed.
#define OSPREY_DLRM_REQUIRE_GPU()                                                  \
  do {                                                                             \
    if (::osprey::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

namespace osprey::cuda::testing {

struct Outputs {
  std::vector<float> dense_grad, row_grad, probs;
  float loss = 0.0f;
  std::vector<float> predicted;  // Predict's probs (GPU runs only)
};

inline models::DlrmConfig MakeDlrmConfig(int num_dense, int num_sparse, int d, std::vector<int> bottom,
                                         std::vector<int> top) {
  models::DlrmConfig c;
  c.num_dense = num_dense;
  c.num_sparse = num_sparse;
  c.embedding_dim = d;
  c.bottom_mlp = std::move(bottom);
  c.top_mlp = std::move(top);
  return c;
}

// The Criteo Kaggle shape of the DLRM benchmarks: top input 16 + 27 * 26 / 2 = 367.
inline models::DlrmConfig KaggleConfig() { return MakeDlrmConfig(13, 26, 16, {512, 256, 64, 16}, {512, 256, 1}); }

inline Problem MakeProblemOrFail(const models::DlrmConfig& config, int batch, const ProblemOptions& options) {
  Problem p;
  std::string error;
  EXPECT_TRUE(MakeProblem(config, batch, options, &p, &error)) << error;
  return p;
}

inline ProblemOptions MakeOptions(uint64_t seed, double kink_margin, uint64_t id_range = 1000) {
  ProblemOptions o;
  o.seed = seed;
  o.kink_margin = kink_margin;
  o.id_range = id_range;
  return o;
}

// GpuDlrm on device 0 with max_batch and `precision`; null (and a test failure) when Make fails.
inline std::unique_ptr<GpuDlrm> MakeGpuOrFail(const models::DlrmConfig& config, int max_batch,
                                              MlpPrecision precision) {
  GpuDlrmOptions options;
  options.precision = precision;
  auto made = GpuDlrm::Make(config, 0, max_batch, options);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return made.ok() ? std::move(made).value() : nullptr;
}

// A non-blocking stream of the test's own, so nothing relies on the legacy default stream.
class Stream {
 public:
  Stream() { EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess); }
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

inline Outputs RunCpu(const Problem& p) {
  Outputs out;
  auto model = models::Dlrm::Make(p.config);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return out;
  out.dense_grad.assign((*model)->num_dense_params(), 0.0f);
  out.row_grad.assign(p.rows.size(), 0.0f);
  out.probs.assign(p.batch.size, 0.0f);
  out.loss = (*model)->ForwardBackward(p.params.data(), p.rows.data(), p.num_rows(), p.row_index.data(), p.batch,
                                       out.dense_grad.data(), out.row_grad.data(), out.probs.data());
  return out;
}

// The CPU reference of the bf16 mode (bf16_reference.h) as Outputs; `predicted` repeats probs.
inline Outputs RunBf16Reference(const Problem& p, bool bf16_operands = true) {
  ReferenceOutputs r = Bf16Reference(p, bf16_operands);
  Outputs out;
  out.dense_grad = std::move(r.dense_grad);
  out.row_grad = std::move(r.row_grad);
  out.probs = std::move(r.probs);
  out.loss = r.loss;
  out.predicted = out.probs;
  return out;
}

inline Outputs RunGpu(GpuDlrm* model, const Problem& p, cudaStream_t stream, const BackwardHooks* hooks = nullptr) {
  Outputs out;
  const size_t n = static_cast<size_t>(p.batch.size);
  DeviceBuffer params = Upload(p.params), rows = Upload(p.rows), index = Upload(p.row_index);
  DeviceBuffer dense = Upload(p.batch.dense), labels = Upload(p.batch.labels);
  DeviceBuffer dense_grad = PoisonedFloats(p.params.size()), row_grad = PoisonedFloats(p.rows.size());
  DeviceBuffer probs = PoisonedFloats(n), loss = PoisonedFloats(1), predicted = PoisonedFloats(n);
  const Status st = model->ForwardBackward(params.as<float>(), rows.as<float>(), p.num_rows(), index.as<int32_t>(),
                                           dense.as<float>(), labels.as<float>(), p.batch.size,
                                           dense_grad.as<float>(), row_grad.as<float>(), probs.as<float>(),
                                           loss.as<float>(), stream, hooks);
  EXPECT_TRUE(st.ok()) << st.ToString();
  const Status pst = model->Predict(params.as<float>(), rows.as<float>(), p.num_rows(), index.as<int32_t>(),
                                    dense.as<float>(), p.batch.size, predicted.as<float>(), stream);
  EXPECT_TRUE(pst.ok()) << pst.ToString();
  const cudaError_t err = cudaStreamSynchronize(stream);
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  out.dense_grad = Download<float>(dense_grad.data(), p.params.size());
  out.row_grad = Download<float>(row_grad.data(), p.rows.size());
  out.probs = Download<float>(probs.data(), n);
  out.loss = Download<float>(loss.data(), 1)[0];
  out.predicted = Download<float>(predicted.data(), n);
  return out;
}

// The default DLRM run twice on one model at `precision`: only the row gradients use atomics, so
// the dense gradients, the probabilities and the loss must be bit-identical run to run.
inline void ExpectDenseResultsReproducible(MlpPrecision precision, uint64_t seed) {
  const models::DlrmConfig config;
  const Problem p = MakeProblemOrFail(config, 1000, MakeOptions(seed, 0));
  auto gpu = MakeGpuOrFail(config, 1000, precision);
  ASSERT_NE(gpu, nullptr);
  Stream stream;
  const Outputs a = RunGpu(gpu.get(), p, stream.get());
  const Outputs b = RunGpu(gpu.get(), p, stream.get());
  EXPECT_TRUE(a.dense_grad == b.dense_grad);
  EXPECT_TRUE(a.probs == b.probs);
  EXPECT_EQ(a.loss, b.loss);
}

// Every element: |gpu - cpu| <= rtol * |cpu| + atol * max|cpu| (atol is relative to the tensor's
// scale, so near-cancelled sums are not held to a relative bound they cannot meet). NaN fails.
inline void ExpectElementwiseClose(const float* gpu, const float* cpu, size_t n, double rtol, double atol,
                                   const std::string& what) {
  double scale = 0;
  for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(static_cast<double>(cpu[i])));
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double diff = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
    if (!(diff <= rtol * std::fabs(static_cast<double>(cpu[i])) + atol * scale) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i] << " (scale " << scale << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": elements outside rtol " << rtol << " / atol " << atol << " x scale, of " << n;
}

// ||gpu - cpu||_2 <= rtol * ||cpu||_2, and every gpu element finite.
inline void ExpectNormClose(const float* gpu, const float* cpu, size_t n, double rtol, const std::string& what) {
  double diff = 0, ref = 0;
  size_t non_finite = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(gpu[i])) ++non_finite;
    diff += (static_cast<double>(gpu[i]) - cpu[i]) * (static_cast<double>(gpu[i]) - cpu[i]);
    ref += static_cast<double>(cpu[i]) * cpu[i];
  }
  EXPECT_EQ(non_finite, 0u) << what << ": non-finite gpu elements";
  EXPECT_LE(std::sqrt(diff), rtol * std::sqrt(ref)) << what << ": relative error " << std::sqrt(diff / ref);
}

// How closely GPU results must match the CPU model; see gpu_dlrm_test.cc for the reasoning.
struct Tolerance {
  bool normwise = false;  // false: ExpectElementwiseClose(rtol, atol); true: ExpectNormClose(rtol)
  double rtol = 1e-4;
  double atol = 1e-5;
};
inline constexpr Tolerance kFp32Tolerance{false, 1e-4, 1e-5};
inline constexpr Tolerance kTf32Tolerance{true, 1e-2, 0.0};

inline void ExpectClose(const std::vector<float>& gpu, size_t offset, const std::vector<float>& cpu, size_t n,
                        const Tolerance& tol, const std::string& what) {
  ASSERT_LE(offset + n, gpu.size()) << what;
  ASSERT_LE(offset + n, cpu.size()) << what;
  if (tol.normwise) {
    ExpectNormClose(gpu.data() + offset, cpu.data() + offset, n, tol.rtol, what);
  } else {
    ExpectElementwiseClose(gpu.data() + offset, cpu.data() + offset, n, tol.rtol, tol.atol, what);
  }
}

// Compares probs, loss, every layer's W and b gradient (each with its own scale) and the row
// gradients; the unused last row's gradient must be exactly zero; Predict must agree with the
// probs of ForwardBackward.
inline void ExpectMatchesCpu(const Problem& p, const Outputs& gpu, const Outputs& cpu, const Tolerance& tol) {
  const size_t n = static_cast<size_t>(p.batch.size);
  ExpectClose(gpu.probs, 0, cpu.probs, n, tol, "probs");
  ExpectClose(gpu.predicted, 0, cpu.probs, n, tol, "Predict probs");
  EXPECT_LE(std::fabs(static_cast<double>(gpu.loss) - cpu.loss), tol.rtol * std::fabs(cpu.loss) + 1e-7)
      << "loss: gpu " << gpu.loss << " cpu " << cpu.loss;
  for (const LayerSpec& layer : DlrmLayers(p.config)) {
    ExpectClose(gpu.dense_grad, layer.weight, cpu.dense_grad, static_cast<size_t>(layer.in) * layer.out, tol,
                "dense_grad " + layer.name + ".W");
    ExpectClose(gpu.dense_grad, layer.bias, cpu.dense_grad, layer.out, tol, "dense_grad " + layer.name + ".b");
  }
  ExpectClose(gpu.row_grad, 0, cpu.row_grad, cpu.row_grad.size(), tol, "row_grad");
  const size_t d = static_cast<size_t>(p.config.embedding_dim);
  ASSERT_EQ(gpu.row_grad.size(), p.rows.size());
  for (size_t c = 0; c < d; ++c) EXPECT_EQ(gpu.row_grad[p.rows.size() - d + c], 0.0f) << "unused row, column " << c;
}

}  // namespace osprey::cuda::testing
