#include "python/src/kernels.h"

#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "worker/data/multiversion.h"
#include "worker/models/dense_ops.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace osprey::python {
namespace {

namespace ops = ::osprey::models::ops;

template <class T, class Shape>
using Array = nb::ndarray<T, Shape, nb::c_contig, nb::device::cpu>;

[[noreturn]] void Bad(const std::string& what) { throw nb::value_error(what.c_str()); }

std::string Dims(size_t a, size_t b) { return "[" + std::to_string(a) + " x " + std::to_string(b) + "]"; }

// out[index[i]] += src[i] for rows of out's width: the per-key gradient sums of a row gather's
// backward (what index_add_ does, without its per-row overhead in torch 1.13: ~40x here).
void ScatterAddRows(Array<const int64_t, nb::ndim<1>> index, Array<const float, nb::ndim<2>> src,
                    Array<float, nb::ndim<2>> out) {
  const size_t n = index.shape(0), d = out.shape(1), rows = out.shape(0);
  if (src.shape(0) != n || src.shape(1) != d) {
    Bad("scatter_add_rows: src is " + Dims(src.shape(0), src.shape(1)) + ", needs " + Dims(n, d));
  }
  bool out_of_range = false;
  int64_t bad = 0;
  size_t bad_at = 0;
  {
    nb::gil_scoped_release unlocked;
    const int64_t* idx = index.data();
    const float* g = src.data();
    float* o = out.data();
    for (size_t i = 0; i < n; ++i) {
      const int64_t r = idx[i];
      if (r < 0 || static_cast<size_t>(r) >= rows) {
        out_of_range = true;
        bad = r;
        bad_at = i;
        break;
      }
      ops::Axpy(1.0f, g + i * d, o + static_cast<size_t>(r) * d, static_cast<int>(d));
    }
  }
  if (out_of_range) {
    Bad("scatter_add_rows: index[" + std::to_string(bad_at) + "] = " + std::to_string(bad) + " is outside [0, " +
        std::to_string(rows) + ")");
  }
}

// D > 0: the row width as a compile-time constant (unrolled and vectorised; the default job's 16
// is ~3x faster so); D == 0: any width d.
template <int D>
inline void PairsT(const float* z, size_t n, int vectors, int d, float* out) {
  const int w = D > 0 ? D : d;
  const size_t stride = static_cast<size_t>(vectors) * w;
  for (size_t b = 0; b < n; ++b) {
    const float* zb = z + b * stride;
    for (int i = 0; i < vectors; ++i) {
      const float* zi = zb + i * w;
      for (int j = i + 1; j < vectors; ++j) {
        const float* zj = zb + j * w;
        float acc = 0;
        if constexpr (D > 0) {
          for (int k = 0; k < D; ++k) acc += zi[k] * zj[k];
        } else {
          acc = ops::Dot(zi, zj, w);
        }
        *out++ = acc;
      }
    }
  }
}

template <int D>
inline void PairsGradT(const float* z, const float* grad, size_t n, int vectors, int d, float* z_grad) {
  const int w = D > 0 ? D : d;
  const size_t stride = static_cast<size_t>(vectors) * w;
  std::fill_n(z_grad, n * stride, 0.0f);
  for (size_t b = 0; b < n; ++b) {
    const float* zb = z + b * stride;
    float* gb = z_grad + b * stride;
    for (int i = 0; i < vectors; ++i) {
      for (int j = i + 1; j < vectors; ++j) {
        const float g = *grad++;
        float* __restrict gi = gb + i * w;
        float* __restrict gj = gb + j * w;
        const float* zi = zb + i * w;
        const float* zj = zb + j * w;
        for (int k = 0; k < w; ++k) {
          gi[k] += g * zj[k];
          gj[k] += g * zi[k];
        }
      }
    }
  }
}

OSPREY_MULTIVERSION void Pairs(const float* z, size_t n, int vectors, int d, float* out) {
  if (d == 16) return PairsT<16>(z, n, vectors, d, out);
  PairsT<0>(z, n, vectors, d, out);
}

OSPREY_MULTIVERSION void PairsGrad(const float* z, const float* grad, size_t n, int vectors, int d, float* z_grad) {
  if (d == 16) return PairsGradT<16>(z, grad, n, vectors, d, z_grad);
  PairsGradT<0>(z, grad, n, vectors, d, z_grad);
}

size_t CheckPairs(const char* what, const Array<const float, nb::ndim<3>>& z, size_t rows, size_t cols) {
  const size_t pairs = z.shape(1) * (z.shape(1) - 1) / 2;
  if (rows != z.shape(0) || cols != pairs) {
    Bad(std::string(what) + ": z is [" + std::to_string(z.shape(0)) + " x " + std::to_string(z.shape(1)) + " x " +
        std::to_string(z.shape(2)) + "], so the pairs are " + Dims(z.shape(0), pairs) + ", got " + Dims(rows, cols));
  }
  return pairs;
}

// out[b] = z_bi . z_bj for i < j, in the order (0,1), (0,2), ..., (1,2), ... (the C++ DLRM's).
void DotPairs(Array<const float, nb::ndim<3>> z, Array<float, nb::ndim<2>> out) {
  CheckPairs("dot_pairs", z, out.shape(0), out.shape(1));
  nb::gil_scoped_release unlocked;
  Pairs(z.data(), z.shape(0), static_cast<int>(z.shape(1)), static_cast<int>(z.shape(2)), out.data());
}

// z_grad (overwritten) = d loss / d z given grad = d loss / d dot_pairs(z).
void DotPairsGrad(Array<const float, nb::ndim<3>> z, Array<const float, nb::ndim<2>> grad,
                  Array<float, nb::ndim<3>> z_grad) {
  CheckPairs("dot_pairs_grad", z, grad.shape(0), grad.shape(1));
  for (int k = 0; k < 3; ++k) {
    if (z_grad.shape(k) != z.shape(k)) Bad("dot_pairs_grad: z_grad's shape differs from z's");
  }
  nb::gil_scoped_release unlocked;
  PairsGrad(z.data(), grad.data(), z.shape(0), static_cast<int>(z.shape(1)), static_cast<int>(z.shape(2)),
            z_grad.data());
}

}  // namespace

void AddKernels(nb::module_& m) {
  m.def("scatter_add_rows", &ScatterAddRows, "index"_a.noconvert(), "src"_a.noconvert(), "out"_a.noconvert());
  m.def("dot_pairs", &DotPairs, "z"_a.noconvert(), "out"_a.noconvert());
  m.def("dot_pairs_grad", &DotPairsGrad, "z"_a.noconvert(), "grad"_a.noconvert(), "z_grad"_a.noconvert());
}

}  // namespace osprey::python
