// CompressionDiagnostics: the checks that show why a compressed run stalls or diverges (the
// troubleshooting guide's problem 1), measured per layer of the model on what the compressor
// actually sent:
//   - the L2 norm of each layer's raw gradient and of its decoded update (per step, RMS over the
//     horizon below), and their ratio (~0: the layer is starved);
//   - the cosine similarity between the raw gradients summed over the horizon and the decoded
//     updates summed over it (error feedback keeps it near 1; the guide's healthy threshold is
//     0.85);
//   - the share of steps in which a layer got no update at all.
// Cheap: per message O(k + samples) beyond the raw norm's samples; each (layer, server message)
// piece keeps at most max_samples evenly strided positions (all of a smaller layer), and the raw
// norm of a larger one is estimated from them. Sparse frames are read in place; other codecs'
// frames are decoded once into a scratch vector.
//
// Horizon: the sums and means are exponentially weighted over the last ~horizon encodes
// (weight (1 - 1/horizon)^age), so they follow the run without growing; with error feedback the
// decoded sum trails the raw one only by the residual, so the cosine tends to 1 once the horizon
// is long against 1 / density.
//
// Thread-safety: none; the owner (DenseCompressor) serializes calls under its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/codec/encoded.h"
#include "common/codec/tensor_layout.h"
#include "common/status.h"

namespace osprey::worker {

inline constexpr double kHealthyCosine = 0.85;     // below: warn (the guide's threshold)
inline constexpr double kMaxNoUpdateShare = 0.25;  // above: warn (layers left without updates)
inline constexpr size_t kDiagnosticsHorizon = 200;  // encodes
inline constexpr size_t kDiagnosticsSamples = 4096;

struct LayerDiagnostics {
  std::string name;
  double raw_norm = 0;         // weighted RMS over steps of ||g_l||_2 (sampled estimate)
  double sent_norm = 0;        // the same of the decoded update (exact for sparse frames)
  double cosine = 1;           // cos(weighted sum of g_l, weighted sum of decoded_l), sampled
  double no_update_share = 0;  // weighted share of steps in which the layer got nothing
  double norm_ratio() const { return raw_norm > 0 ? sent_norm / raw_norm : 1.0; }
};

struct DiagnosticsSummary {
  std::vector<LayerDiagnostics> layers;  // in layout order; empty before the first message
  double cosine = 1;                     // over every layer's samples together
  double no_update_share = 0;            // mean over layers
  uint64_t steps = 0;                    // encodes observed (most over the pieces; 0: none)
};

// "" when healthy, else e.g. "compression: cosine 0.12 < 0.85, 40% of layers without update".
std::string CompressionWarning(const DiagnosticsSummary& s);

class CompressionDiagnostics {
 public:
  using Key = std::pair<uint32_t, int>;  // (table, server)
  using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

  // `layout`: the tensors of the table (empty: one tensor "dense" per message).
  CompressionDiagnostics(codec::TensorLayout layout, size_t horizon = kDiagnosticsHorizon,
                         size_t max_samples = kDiagnosticsSamples)
      : layout_(std::move(layout)), decay_(1.0 - 1.0 / static_cast<double>(horizon)), max_samples_(max_samples) {}

  // (Re)starts stream `key`: a message of n floats lying at `ranges` of the table.
  void StartStream(const Key& key, const Ranges& ranges, size_t n);
  // One encoded message of a started stream: the raw gradient g[0, n) and the frame sent for it.
  // Errors: FailedPrecondition for a stream not started or of another length; the frame's own
  // validation errors (it is the one the server will decode).
  Status Observe(const Key& key, const float* g, size_t n, const codec::EncodedView& frame);

  // The message positions Observe reads of g for stream `key` (piece by piece, ascending), empty
  // for a stream not started: a caller whose gradient is elsewhere (on a GPU) fetches only these.
  std::vector<uint32_t> SamplePositions(const Key& key) const;
  // Observe with the raw gradient given at SamplePositions(key) only: samples[i] = g[position i],
  // num_samples of them. Same results as Observe. Errors: Observe's, and InvalidArgument for a
  // num_samples that is not the positions' count.
  Status ObserveSamples(const Key& key, const float* samples, size_t num_samples, size_t n,
                        const codec::EncodedView& frame);

  DiagnosticsSummary Summary() const;

 private:
  struct Piece {
    uint32_t tensor = 0;
    size_t begin = 0, size = 0, stride = 1, samples = 0;
    std::vector<double> raw_sum, dec_sum;  // weighted sums per sampled position
    double raw_sq = 0, dec_sq = 0;         // weighted sums of ||g||^2, ||decoded||^2
    double no_update = 0, weight = 0;      // weighted count of starved steps; sum of weights
    uint64_t steps = 0;
  };

  // Observe over g (dense, when not null) or over the samples at SamplePositions.
  Status ObserveImpl(const Key& key, const float* g, const float* samples, size_t n, const codec::EncodedView& frame);

  const codec::TensorLayout layout_;
  const double decay_;
  const size_t max_samples_;
  std::map<Key, std::vector<Piece>> streams_;
  std::vector<float> dense_;  // decoded non-sparse frames
};

}  // namespace osprey::worker
