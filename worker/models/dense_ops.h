// Small dense kernels for the CPU models: row-major matrix products written so that the inner loop
// is a contiguous axpy (vectorised by the compiler without reassociating sums, so results are
// deterministic), with four rows of the left operand sharing each load of the right operand.
//
// Internal to osprey::models. All pointers are caller-owned; outputs must not alias inputs.
#pragma once

#include <cstddef>

namespace osprey::models::ops {

// C[m x n] += A[m x k] * B[k x n].
inline void GemmAcc(const float* __restrict a, const float* __restrict b, float* __restrict c, int m, int k,
                    int n) {
  int i = 0;
  for (; i + 4 <= m; i += 4) {
    const float* a0 = a + static_cast<size_t>(i) * k;
    const float* a1 = a0 + k;
    const float* a2 = a1 + k;
    const float* a3 = a2 + k;
    float* __restrict c0 = c + static_cast<size_t>(i) * n;
    float* __restrict c1 = c0 + n;
    float* __restrict c2 = c1 + n;
    float* __restrict c3 = c2 + n;
    for (int p = 0; p < k; ++p) {
      const float* __restrict bp = b + static_cast<size_t>(p) * n;
      const float s0 = a0[p], s1 = a1[p], s2 = a2[p], s3 = a3[p];
      for (int j = 0; j < n; ++j) {
        const float v = bp[j];
        c0[j] += s0 * v;
        c1[j] += s1 * v;
        c2[j] += s2 * v;
        c3[j] += s3 * v;
      }
    }
  }
  for (; i < m; ++i) {
    const float* ai = a + static_cast<size_t>(i) * k;
    float* __restrict ci = c + static_cast<size_t>(i) * n;
    for (int p = 0; p < k; ++p) {
      const float* __restrict bp = b + static_cast<size_t>(p) * n;
      const float s = ai[p];
      for (int j = 0; j < n; ++j) ci[j] += s * bp[j];
    }
  }
}

// C[k x n] += A^T * B, where A is [m x k] and B is [m x n] (e.g. weight gradient = X^T * dY).
inline void GemmTnAcc(const float* __restrict a, const float* __restrict b, float* __restrict c, int m, int k,
                      int n) {
  int i = 0;
  for (; i + 4 <= m; i += 4) {
    const float* a0 = a + static_cast<size_t>(i) * k;
    const float* __restrict b0 = b + static_cast<size_t>(i) * n;
    const float* __restrict b1 = b0 + n;
    const float* __restrict b2 = b1 + n;
    const float* __restrict b3 = b2 + n;
    for (int p = 0; p < k; ++p) {
      float* __restrict cp = c + static_cast<size_t>(p) * n;
      const float s0 = a0[p], s1 = a0[k + p], s2 = a0[2 * k + p], s3 = a0[3 * k + p];
      for (int j = 0; j < n; ++j) cp[j] += s0 * b0[j] + s1 * b1[j] + s2 * b2[j] + s3 * b3[j];
    }
  }
  for (; i < m; ++i) {
    const float* ai = a + static_cast<size_t>(i) * k;
    const float* __restrict bi = b + static_cast<size_t>(i) * n;
    for (int p = 0; p < k; ++p) {
      float* __restrict cp = c + static_cast<size_t>(p) * n;
      const float s = ai[p];
      for (int j = 0; j < n; ++j) cp[j] += s * bi[j];
    }
  }
}

// out[cols x rows] = in[rows x cols]^T.
inline void Transpose(const float* __restrict in, float* __restrict out, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) out[static_cast<size_t>(c) * rows + r] = in[static_cast<size_t>(r) * cols + c];
  }
}

// Dot product with eight independent partial sums (vectorisable, fixed summation order).
inline float Dot(const float* __restrict x, const float* __restrict y, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * y[i + l];
  }
  float sum = 0;
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum + (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])));
}

// y[0, n) += s * x[0, n).
inline void Axpy(float s, const float* __restrict x, float* __restrict y, int n) {
  for (int i = 0; i < n; ++i) y[i] += s * x[i];
}

}  // namespace osprey::models::ops
