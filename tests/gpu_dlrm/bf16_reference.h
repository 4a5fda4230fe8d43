// The CPU reference of GpuDlrm's bf16 mode (MlpPrecision::kBf16), CPU only: models::Dlrm's math
// with every operand of the MLPs' matrix products rounded to bf16 (round to nearest, ties to
// even) and the products summed in double:
//   forward      y = bf16(x) * bf16(W) + b, then ReLU; x the dense features, a layer's output or
//                the interaction's output, each rounded where it enters a product
//   weight grad  dW = bf16(x)^T * bf16(g), g the pre-activation gradient
//   input grad   dx = bf16(g) * bf16(W)^T
//   bias grad    db = sum of the unrounded g
// Everything else (interaction, loss, the ReLU masks, the stored activations and gradients) is
// fp32 values as in the CPU model. GpuDlrm in bf16 mode differs from this only by its fp32
// summation order and by the rare operand that the two round to neighbouring bf16 values because
// their fp32 inputs differ in the last bits.
#pragma once

#include <vector>

#include "tests/gpu_dlrm/dlrm_problem.h"

namespace osprey::cuda::testing {

// x rounded to the nearest bf16 (8 significant bits), ties to even, returned as a float; as
// __float2bfloat16_rn: values beyond the largest bf16 round to infinity, NaN stays NaN.
float RoundToBf16(float x);

struct ReferenceOutputs {
  std::vector<float> dense_grad;  // [num_dense_params]
  std::vector<float> row_grad;    // [num_rows x d]
  std::vector<float> probs;       // [batch]
  float loss = 0.0f;
};

// ForwardBackward of problem `p` as described above. With bf16_operands false nothing is rounded:
// then it is models::Dlrm's math in double accumulation (which is what lets a test check this
// reference's own structure against the CPU model tightly).
ReferenceOutputs Bf16Reference(const Problem& p, bool bf16_operands = true);

// KinkMargins (dlrm_problem.h) of the bf16-operand forward pass above: per sample, the smallest
// |pre-activation| / rms(pre-activations of its layer) over every ReLU unit.
std::vector<double> Bf16KinkMargins(const Problem& p);

}  // namespace osprey::cuda::testing
