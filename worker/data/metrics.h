// Evaluation metrics for binary click prediction.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>

namespace osprey::data {

// Area under the ROC curve, exact: the probability that a random positive scores above a random
// negative, ties counting one half (equivalently, Mann-Whitney U with tied scores given their
// average rank). A label > 0.5 is a positive. O(n log n) time, O(n) extra memory.
// Returns NaN when n == 0, when only one class is present, or when any score is NaN.
double Auc(const float* scores, const float* labels, size_t n);

// Mean binary cross-entropy -[y log p + (1 - y) log(1 - p)] with p clamped to [1e-7, 1 - 1e-7],
// so a confident mistake costs about 16.1 instead of infinity. Labels may be soft (in [0, 1]).
// Returns NaN when n == 0.
double LogLoss(const float* probs, const float* labels, size_t n);

}  // namespace osprey::data
