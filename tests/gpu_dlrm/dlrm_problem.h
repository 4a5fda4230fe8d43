// Random DLRM problems (parameters, rows, a batch and its row index) for the GpuDlrm tests and
// benchmark, CPU only.
//
// Comparing two float implementations of a ReLU network breaks down where a pre-activation is so
// close to zero that the two round it to opposite signs: the unit is on in one and off in the
// other, and every gradient that flows through it differs by O(1). MakeProblem therefore redraws
// the samples that have such a "kink" (|pre-activation| below kink_margin times the rms of its
// layer, measured in double precision), so the comparisons can be tight without being flaky.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "worker/data/batch.h"
#include "worker/models/dlrm.h"

namespace osprey::cuda::testing {

// One fully connected layer of models::Dlrm's flat parameter vector (layout of dlrm.h), with a
// name such as "top[1]" for messages.
struct LayerSpec {
  std::string name;
  int in = 0;
  int out = 0;
  size_t weight = 0;
  size_t bias = 0;
  bool relu = false;
};

// Bottom layers, then top layers.
std::vector<LayerSpec> DlrmLayers(const models::DlrmConfig& config);

struct ProblemOptions {
  uint64_t seed = 1;
  uint64_t id_range = 1000;   // ids of each feature drawn from [0, id_range): small -> rows shared
  double kink_margin = 1e-4;  // see above; 0 turns the redrawing off
  bool bf16_margins = false;  // measure the margins on the bf16-operand pass of GpuDlrm's bf16
                              // mode (Bf16KinkMargins, bf16_reference.h) instead of the exact one
  int max_rounds = 100;       // redraw rounds before giving up
};

struct Problem {
  models::DlrmConfig config;
  data::Batch batch;
  std::vector<uint64_t> keys;       // distinct FeatureKeys of the batch (data::DedupeKeys)
  std::vector<int32_t> row_index;   // [size x num_sparse]
  std::vector<float> params;        // [num_dense_params]: He/Glorot init plus noise (biases non-zero)
  std::vector<float> rows;          // [(keys.size() + 1) x d]; the last row is used by no sample
  int rounds = 0;                   // redraw rounds it took

  size_t num_rows() const { return rows.size() / static_cast<size_t>(config.embedding_dim); }
};

// Draws a problem. Returns false (with *error set) when the config is invalid or kink redrawing
// did not converge within max_rounds.
bool MakeProblem(const models::DlrmConfig& config, int batch_size, const ProblemOptions& options, Problem* problem,
                 std::string* error);

// Per sample: the smallest |pre-activation| / rms(pre-activations of its layer over the batch)
// over every ReLU unit, from a double-precision forward pass (+infinity without ReLU units).
std::vector<double> KinkMargins(const Problem& problem);

}  // namespace osprey::cuda::testing
