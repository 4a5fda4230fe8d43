// LayerTopKWorkspace: the block -> (layer, chunk) table of the segmented layer-wise top-k and its
// per-layer scratch, built once per layer list.
#include <string>

#include "common/codec/select_rule.h"
#include "worker/cuda/layer_device.cuh"
#include "worker/cuda/select_device.cuh"

namespace osprey::cuda {
namespace {

constexpr uint64_t kBlocksPerSm = 4;  // blocks of the whole list per SM when the chunk is picked

// Enough floats per block that the list makes about kBlocksPerSm blocks per SM, in whole tiles:
// per-block fixed costs (zeroing and flushing a 4096-bin histogram) stay small next to the
// streaming, and the 10^8-float lists still fill the device.
uint32_t PickChunk(uint64_t n, int num_sms) {
  const uint64_t blocks = static_cast<uint64_t>(num_sms > 0 ? num_sms : 1) * kBlocksPerSm;
  const uint64_t tiles = (n + kTile * blocks - 1) / (kTile * blocks);
  return static_cast<uint32_t>(kTile * (tiles > 0 ? tiles : 1));
}

}  // namespace

LayerTopKWorkspace::LayerTopKWorkspace(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LayerTopKWorkspace::~LayerTopKWorkspace() = default;

uint32_t LayerTopKWorkspace::num_layers() const { return impl_->num_layers; }
size_t LayerTopKWorkspace::n() const { return impl_->n; }
uint32_t LayerTopKWorkspace::chunk() const { return impl_->chunk; }
uint32_t LayerTopKWorkspace::num_blocks() const { return impl_->num_blocks; }

StatusOr<std::unique_ptr<LayerTopKWorkspace>> LayerTopKWorkspace::Create(const std::vector<uint32_t>& begin,
                                                                         uint32_t chunk) {
  if (begin.empty() || begin[0] != 0) return InvalidArgument("LayerTopKWorkspace: begin must start with 0");
  for (size_t l = 1; l < begin.size(); ++l) {
    if (begin[l] < begin[l - 1]) {
      return InvalidArgument("LayerTopKWorkspace: begin[" + std::to_string(l) + "] = " + std::to_string(begin[l]) +
                             " < begin[" + std::to_string(l - 1) + "] = " + std::to_string(begin[l - 1]));
    }
  }
  auto w = std::make_unique<Impl>();
  w->n = begin.back();
  w->num_layers = static_cast<uint32_t>(begin.size() - 1);
  int device = 0, num_sms = 1;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  w->chunk = chunk > 0 ? chunk : PickChunk(w->n, num_sms);
  std::vector<LayerSpan> spans;
  for (uint32_t l = 0; l < w->num_layers; ++l) {
    const uint64_t size = begin[l + 1] - begin[l];
    const uint64_t chunks = (size + w->chunk - 1) / w->chunk;
    if (spans.size() + chunks >= (uint64_t{1} << 31)) {
      return InvalidArgument("LayerTopKWorkspace: chunk " + std::to_string(w->chunk) + " makes more than 2^31 blocks");
    }
    for (uint64_t c = 0; c < chunks; ++c) spans.push_back(LayerSpan{l, static_cast<uint32_t>(c)});
  }
  w->num_blocks = static_cast<uint32_t>(spans.size());
  OSPREY_ASSIGN_OR_RETURN(w->spans, DeviceBuffer::Allocate(sizeof(LayerSpan) * spans.size()));
  OSPREY_ASSIGN_OR_RETURN(w->counts, DeviceBuffer::Allocate(sizeof(uint2) * spans.size()));
  OSPREY_ASSIGN_OR_RETURN(w->states, DeviceBuffer::Allocate(sizeof(LayerState) * w->num_layers));
  OSPREY_ASSIGN_OR_RETURN(w->hists,
                          DeviceBuffer::Allocate(sizeof(uint32_t) * codec::kMaxDigitBins * size_t{w->num_layers}));
  if (!spans.empty()) {
    OSPREY_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(w->spans.data(), spans.data(), sizeof(LayerSpan) * spans.size(), cudaMemcpyHostToDevice));
  }
  // The decide kernels re-zero each histogram after reading it; this is the first zeroing.
  if (w->hists.size() > 0) OSPREY_CUDA_RETURN_IF_ERROR(cudaMemset(w->hists.data(), 0, w->hists.size()));
  // The copies above run on the legacy stream, which non-blocking streams do not wait for.
  OSPREY_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return std::unique_ptr<LayerTopKWorkspace>(new LayerTopKWorkspace(std::move(w)));
}

}  // namespace osprey::cuda
