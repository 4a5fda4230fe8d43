#include "tests/gpu_dlrm/bf16_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "worker/models/loss.h"

namespace osprey::cuda::testing {
namespace {

// A copy of x [count], each element rounded to bf16 when `bf16`.
std::vector<float> Rounded(const float* x, size_t count, bool bf16) {
  std::vector<float> r(count);
  if (count > 0) std::copy_n(x, count, r.data());
  if (bf16) {
    for (float& v : r) v = RoundToBf16(v);
  }
  return r;
}

// One forward pass: per layer its pre-activation and output [n x out]; the interaction's input z
// [n x vectors x d] and output [n x top_in].
struct Pass {
  std::vector<std::vector<float>> pre, out;
  std::vector<float> z, top_input;
};

// y [n x out] = x [n x in] * W + b with the operands rounded as the mode says, summed in double.
void Dense(const LayerSpec& layer, const std::vector<float>& params, const float* x, int n, bool bf16,
           std::vector<float>* y) {
  const size_t in = static_cast<size_t>(layer.in), out = static_cast<size_t>(layer.out);
  const std::vector<float> xr = Rounded(x, n * in, bf16);
  const std::vector<float> w = Rounded(params.data() + layer.weight, in * out, bf16);
  y->assign(n * out, 0.0f);
  std::vector<double> acc(out);
  for (size_t b = 0; b < static_cast<size_t>(n); ++b) {
    for (size_t o = 0; o < out; ++o) acc[o] = params[layer.bias + o];
    for (size_t i = 0; i < in; ++i) {
      const double xi = xr[b * in + i];
      for (size_t o = 0; o < out; ++o) acc[o] += xi * w[i * out + o];
    }
    for (size_t o = 0; o < out; ++o) (*y)[b * out + o] = static_cast<float>(acc[o]);
  }
}

// Runs layers [first, last) from input x, appending each layer's pre-activation and output.
void Mlp(const std::vector<LayerSpec>& layers, size_t first, size_t last, const Problem& p, const float* x, bool bf16,
         Pass* pass) {
  for (size_t l = first; l < last; ++l) {
    pass->pre.emplace_back();
    Dense(layers[l], p.params, x, p.batch.size, bf16, &pass->pre.back());
    pass->out.push_back(pass->pre.back());
    if (layers[l].relu) {
      for (float& v : pass->out.back()) v = std::max(v, 0.0f);
    }
    x = pass->out.back().data();
  }
}

Pass Forward(const Problem& p, bool bf16) {
  const std::vector<LayerSpec> layers = DlrmLayers(p.config);
  const size_t num_bottom = p.config.bottom_mlp.size();
  const int n = p.batch.size, d = p.config.embedding_dim, num_sparse = p.config.num_sparse;
  const size_t vectors = static_cast<size_t>(num_sparse) + 1;
  const size_t top_in = static_cast<size_t>(layers[num_bottom].in);
  Pass pass;
  Mlp(layers, 0, num_bottom, p, p.batch.dense.data(), bf16, &pass);
  pass.z.assign(static_cast<size_t>(n) * vectors * d, 0.0f);
  pass.top_input.assign(static_cast<size_t>(n) * top_in, 0.0f);
  for (size_t b = 0; b < static_cast<size_t>(n); ++b) {
    float* zb = pass.z.data() + b * vectors * d;
    std::copy_n(pass.out[num_bottom - 1].data() + b * d, d, zb);
    for (int f = 0; f < num_sparse; ++f) {
      const size_t row = static_cast<size_t>(p.row_index[b * num_sparse + f]);
      std::copy_n(p.rows.data() + row * d, d, zb + (f + 1) * static_cast<size_t>(d));
    }
    float* t = pass.top_input.data() + b * top_in;
    std::copy_n(zb, d, t);
    size_t k = static_cast<size_t>(d);
    for (size_t i = 0; i < vectors; ++i) {
      for (size_t j = i + 1; j < vectors; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += static_cast<double>(zb[i * d + c]) * zb[j * d + c];
        t[k++] = static_cast<float>(dot);
      }
    }
  }
  Mlp(layers, num_bottom, layers.size(), p, pass.top_input.data(), bf16, &pass);
  return pass;
}

// Back-propagates g = d loss / d(output of layer last - 1) through layers [first, last): writes
// their W and b gradients into dense_grad and, when input_grad is not null, d(input of `first`).
void MlpBackward(const std::vector<LayerSpec>& layers, size_t first, size_t last, const Problem& p, const float* input,
                 const Pass& pass, bool bf16, std::vector<float> g, std::vector<float>* dense_grad,
                 std::vector<float>* input_grad) {
  const size_t n = static_cast<size_t>(p.batch.size);
  for (size_t l = last; l-- > first;) {
    const LayerSpec& layer = layers[l];
    const size_t in = static_cast<size_t>(layer.in), out = static_cast<size_t>(layer.out);
    if (layer.relu) {
      for (size_t i = 0; i < g.size(); ++i) g[i] = pass.out[l][i] > 0.0f ? g[i] : 0.0f;
    }
    const std::vector<float> gr = Rounded(g.data(), n * out, bf16);
    const std::vector<float> xr = Rounded(l > first ? pass.out[l - 1].data() : input, n * in, bf16);
    std::vector<double> dw(in * out, 0.0), db(out, 0.0);
    for (size_t b = 0; b < n; ++b) {
      for (size_t o = 0; o < out; ++o) db[o] += g[b * out + o];
      for (size_t i = 0; i < in; ++i) {
        const double xi = xr[b * in + i];
        for (size_t o = 0; o < out; ++o) dw[i * out + o] += xi * gr[b * out + o];
      }
    }
    for (size_t k = 0; k < in * out; ++k) (*dense_grad)[layer.weight + k] = static_cast<float>(dw[k]);
    for (size_t o = 0; o < out; ++o) (*dense_grad)[layer.bias + o] = static_cast<float>(db[o]);
    if (l == first && input_grad == nullptr) break;
    const std::vector<float> w = Rounded(p.params.data() + layer.weight, in * out, bf16);
    std::vector<float> dx(n * in);
    for (size_t b = 0; b < n; ++b) {
      for (size_t i = 0; i < in; ++i) {
        double sum = 0;
        for (size_t o = 0; o < out; ++o) sum += static_cast<double>(gr[b * out + o]) * w[i * out + o];
        dx[b * in + i] = static_cast<float>(sum);
      }
    }
    if (l == first) {
      *input_grad = std::move(dx);
    } else {
      g = std::move(dx);
    }
  }
}

}  // namespace

float RoundToBf16(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN: adding the rounding bias could make it inf
  u += 0x7fffu + ((u >> 16) & 1u);                 // half an ulp, plus one where the kept lsb is odd
  u &= 0xffff0000u;
  float r = 0.0f;
  std::memcpy(&r, &u, sizeof(r));
  return r;
}

ReferenceOutputs Bf16Reference(const Problem& p, bool bf16_operands) {
  const std::vector<LayerSpec> layers = DlrmLayers(p.config);
  const size_t num_bottom = p.config.bottom_mlp.size();
  const size_t n = static_cast<size_t>(p.batch.size), d = static_cast<size_t>(p.config.embedding_dim);
  const size_t num_sparse = static_cast<size_t>(p.config.num_sparse), vectors = num_sparse + 1;
  const size_t top_in = static_cast<size_t>(layers[num_bottom].in);
  ReferenceOutputs r;
  r.dense_grad.assign(p.params.size(), 0.0f);
  r.row_grad.assign(p.rows.size(), 0.0f);
  r.probs.assign(n, 0.0f);
  if (n == 0) return r;
  const Pass pass = Forward(p, bf16_operands);

  std::vector<float> g(n);
  r.loss = static_cast<float>(
      models::LogitLossAndGrad(pass.out.back().data(), p.batch.labels.data(), static_cast<int>(n), r.probs.data(),
                               g.data()));
  std::vector<float> top_grad;
  MlpBackward(layers, num_bottom, layers.size(), p, pass.top_input.data(), pass, bf16_operands, std::move(g),
              &r.dense_grad, &top_grad);

  // The interaction's backward, in double per sample; row gradients summed in double over uses.
  std::vector<float> bottom_grad(n * d);
  std::vector<double> rows(p.rows.size(), 0.0), zg(vectors * d);
  for (size_t b = 0; b < n; ++b) {
    const float* zb = pass.z.data() + b * vectors * d;
    const float* tg = top_grad.data() + b * top_in;
    std::fill(zg.begin(), zg.end(), 0.0);
    for (size_t c = 0; c < d; ++c) zg[c] = tg[c];
    size_t k = d;
    for (size_t i = 0; i < vectors; ++i) {
      for (size_t j = i + 1; j < vectors; ++j) {
        const double gk = tg[k++];
        for (size_t c = 0; c < d; ++c) {
          zg[i * d + c] += gk * zb[j * d + c];
          zg[j * d + c] += gk * zb[i * d + c];
        }
      }
    }
    for (size_t c = 0; c < d; ++c) bottom_grad[b * d + c] = static_cast<float>(zg[c]);
    for (size_t f = 0; f < num_sparse; ++f) {
      const size_t row = static_cast<size_t>(p.row_index[b * num_sparse + f]);
      for (size_t c = 0; c < d; ++c) rows[row * d + c] += zg[(f + 1) * d + c];
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) r.row_grad[i] = static_cast<float>(rows[i]);

  MlpBackward(layers, 0, num_bottom, p, p.batch.dense.data(), pass, bf16_operands, std::move(bottom_grad),
              &r.dense_grad, nullptr);
  return r;
}

std::vector<double> Bf16KinkMargins(const Problem& p) {
  const std::vector<LayerSpec> layers = DlrmLayers(p.config);
  const size_t n = static_cast<size_t>(p.batch.size);
  std::vector<double> margins(n, std::numeric_limits<double>::infinity());
  if (n == 0) return margins;
  const Pass pass = Forward(p, /*bf16=*/true);
  for (size_t l = 0; l < layers.size(); ++l) {
    if (!layers[l].relu) continue;
    const std::vector<float>& pre = pass.pre[l];
    double sum_sq = 0;
    for (float v : pre) sum_sq += static_cast<double>(v) * v;
    const double rms = std::sqrt(sum_sq / static_cast<double>(pre.size()));
    if (rms == 0) continue;  // a layer that is exactly zero everywhere has no kinks to miss
    const size_t out = static_cast<size_t>(layers[l].out);
    for (size_t b = 0; b < n; ++b) {
      for (size_t o = 0; o < out; ++o) margins[b] = std::min(margins[b], std::fabs(pre[b * out + o]) / rms);
    }
  }
  return margins;
}

}  // namespace osprey::cuda::testing
