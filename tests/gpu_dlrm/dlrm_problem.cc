#include "tests/gpu_dlrm/dlrm_problem.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "tests/gpu_dlrm/bf16_reference.h"
#include "worker/data/random.h"

namespace osprey::cuda::testing {
namespace {

void AddLayers(const char* prefix, int in, const std::vector<int>& widths, bool relu_last, size_t* offset,
               std::vector<LayerSpec>* layers) {
  for (size_t l = 0; l < widths.size(); ++l) {
    LayerSpec spec;
    spec.name = std::string(prefix) + "[" + std::to_string(l) + "]";
    spec.in = in;
    spec.out = widths[l];
    spec.weight = *offset;
    spec.bias = *offset + static_cast<size_t>(in) * static_cast<size_t>(spec.out);
    spec.relu = relu_last || l + 1 < widths.size();
    *offset = spec.bias + static_cast<size_t>(spec.out);
    layers->push_back(spec);
    in = spec.out;
  }
}

// Dense features uniform in [0, 2), ids uniform in [0, id_range), a fair-coin label.
void DrawSample(data::Rng* rng, uint64_t id_range, int b, data::Batch* batch) {
  for (int i = 0; i < batch->num_dense; ++i) {
    batch->dense[static_cast<size_t>(b) * batch->num_dense + i] = static_cast<float>(2.0 * rng->NextUniform());
  }
  for (int f = 0; f < batch->num_sparse; ++f) {
    batch->ids[static_cast<size_t>(b) * batch->num_sparse + f] = rng->NextU64() % id_range;
  }
  batch->labels[b] = rng->NextUniform() < 0.5 ? 1.0f : 0.0f;
}

// A row is a function of its key (and the seed), so redrawing some samples leaves the rows of
// the others unchanged.
void FillRow(uint64_t seed, uint64_t key, int d, float* row) {
  data::Rng rng(data::HashPair(seed, key));
  for (int c = 0; c < d; ++c) row[c] = static_cast<float>(0.5 * rng.NextNormal());
}

void BuildRows(uint64_t seed, Problem* p) {
  const int d = p->config.embedding_dim;
  data::DedupeKeys(p->batch, &p->keys, &p->row_index);
  p->rows.assign((p->keys.size() + 1) * static_cast<size_t>(d), 0.0f);
  for (size_t r = 0; r < p->keys.size(); ++r) FillRow(seed, p->keys[r], d, p->rows.data() + r * d);
  FillRow(seed, ~uint64_t{0}, d, p->rows.data() + p->keys.size() * d);  // the unused row
}

// y = x W + b for one sample, in double.
void Dense(const LayerSpec& layer, const std::vector<float>& params, const std::vector<double>& x,
           std::vector<double>* y) {
  y->assign(params.begin() + static_cast<std::ptrdiff_t>(layer.bias),
            params.begin() + static_cast<std::ptrdiff_t>(layer.bias + layer.out));
  for (int i = 0; i < layer.in; ++i) {
    const float* w = params.data() + layer.weight + static_cast<size_t>(i) * layer.out;
    for (int o = 0; o < layer.out; ++o) (*y)[o] += x[i] * static_cast<double>(w[o]);
  }
}

}  // namespace

std::vector<LayerSpec> DlrmLayers(const models::DlrmConfig& config) {
  std::vector<LayerSpec> layers;
  size_t offset = 0;
  const int vectors = config.num_sparse + 1;
  AddLayers("bottom", config.num_dense, config.bottom_mlp, /*relu_last=*/true, &offset, &layers);
  AddLayers("top", config.embedding_dim + vectors * (vectors - 1) / 2, config.top_mlp, /*relu_last=*/false, &offset,
            &layers);
  return layers;
}

std::vector<double> KinkMargins(const Problem& p) {
  const std::vector<LayerSpec> layers = DlrmLayers(p.config);
  const size_t num_bottom = p.config.bottom_mlp.size();
  const int n = p.batch.size, d = p.config.embedding_dim, num_sparse = p.config.num_sparse;
  std::vector<std::vector<double>> pre(layers.size());  // [n x out] per ReLU layer
  std::vector<double> x, y;
  for (int b = 0; b < n; ++b) {
    x.assign(p.batch.dense.begin() + static_cast<std::ptrdiff_t>(b) * p.batch.num_dense,
             p.batch.dense.begin() + static_cast<std::ptrdiff_t>(b + 1) * p.batch.num_dense);
    for (size_t l = 0; l < layers.size(); ++l) {
      if (l == num_bottom) {  // dot interaction: [z_0 | z_i . z_j for i < j]
        std::vector<std::vector<double>> z(1, x);
        for (int f = 0; f < num_sparse; ++f) {
          const float* row = p.rows.data() + static_cast<size_t>(p.row_index[static_cast<size_t>(b) * num_sparse + f]) * d;
          z.emplace_back(row, row + d);
        }
        for (size_t i = 0; i < z.size(); ++i) {
          for (size_t j = i + 1; j < z.size(); ++j) {
            double dot = 0;
            for (int c = 0; c < d; ++c) dot += z[i][c] * z[j][c];
            x.push_back(dot);
          }
        }
      }
      Dense(layers[l], p.params, x, &y);
      if (layers[l].relu) {
        pre[l].insert(pre[l].end(), y.begin(), y.end());
        for (double& v : y) v = std::max(v, 0.0);
      }
      x.swap(y);
    }
  }
  std::vector<double> margins(n, std::numeric_limits<double>::infinity());
  for (size_t l = 0; l < layers.size(); ++l) {
    if (pre[l].empty()) continue;
    double sum_sq = 0;
    for (double v : pre[l]) sum_sq += v * v;
    const double rms = std::sqrt(sum_sq / static_cast<double>(pre[l].size()));
    if (rms == 0) continue;  // a layer that is exactly zero everywhere has no kinks to miss
    const int out = layers[l].out;
    for (int b = 0; b < n; ++b) {
      for (int o = 0; o < out; ++o) {
        margins[b] = std::min(margins[b], std::fabs(pre[l][static_cast<size_t>(b) * out + o]) / rms);
      }
    }
  }
  return margins;
}

bool MakeProblem(const models::DlrmConfig& config, int batch_size, const ProblemOptions& options, Problem* p,
                 std::string* error) {
  auto model = models::Dlrm::Make(config);
  if (!model.ok()) {
    *error = model.status().ToString();
    return false;
  }
  p->config = config;
  p->params.resize((*model)->num_dense_params());
  (*model)->InitDense(options.seed, p->params.data());
  data::Rng rng(data::HashPair(options.seed, 0x70726f626c656dULL));
  for (float& v : p->params) v += static_cast<float>(0.05 * rng.NextNormal());

  data::Batch& batch = p->batch;
  batch.size = batch_size;
  batch.num_dense = config.num_dense;
  batch.num_sparse = config.num_sparse;
  batch.dense.assign(static_cast<size_t>(batch_size) * config.num_dense, 0.0f);
  batch.ids.assign(static_cast<size_t>(batch_size) * config.num_sparse, 0);
  batch.labels.assign(batch_size, 0.0f);
  batch.oracle_prob.clear();
  for (int b = 0; b < batch_size; ++b) DrawSample(&rng, options.id_range, b, &batch);

  for (p->rounds = 0;; ++p->rounds) {
    BuildRows(options.seed, p);
    if (options.kink_margin <= 0) return true;
    const std::vector<double> margins = options.bf16_margins ? Bf16KinkMargins(*p) : KinkMargins(*p);
    int redrawn = 0;
    for (int b = 0; b < batch_size; ++b) {
      if (margins[b] >= options.kink_margin) continue;
      if (p->rounds == options.max_rounds) {
        *error = "sample " + std::to_string(b) + " still has a ReLU pre-activation within " +
                 std::to_string(options.kink_margin) + " rms of zero after " + std::to_string(p->rounds) + " rounds";
        return false;
      }
      DrawSample(&rng, options.id_range, b, &batch);
      ++redrawn;
    }
    if (redrawn == 0) return true;
  }
}

}  // namespace osprey::cuda::testing
