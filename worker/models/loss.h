// Sigmoid / binary cross-entropy helpers shared by the CPU models. Internal to osprey::models.
#pragma once

#include <algorithm>
#include <cmath>

namespace osprey::models {

// Numerically stable logistic function.
inline float Sigmoid(float logit) {
  if (logit >= 0) return 1.0f / (1.0f + std::exp(-logit));
  const float e = std::exp(logit);
  return e / (1.0f + e);
}

// For n logits and 0/1 labels: writes probs[b] = sigmoid(logit_b) and logit_grad[b] = (p_b - y_b)/n
// (the gradient of the mean loss), and returns the mean binary cross-entropy, computed from the
// logit as softplus(l) - y * l so that it stays finite for confident predictions.
inline double LogitLossAndGrad(const float* logits, const float* labels, int n, float* probs, float* logit_grad) {
  double sum = 0;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int b = 0; b < n; ++b) {
    const float l = logits[b];
    const float p = Sigmoid(l);
    probs[b] = p;
    logit_grad[b] = (p - labels[b]) * inv_n;
    const double ld = l;
    sum += std::max(ld, 0.0) + std::log1p(std::exp(-std::fabs(ld))) - static_cast<double>(labels[b]) * ld;
  }
  return sum / n;
}

}  // namespace osprey::models
