// CUDA codec kernels: error feedback fused with selection/packing, device-side top-k threshold
// estimation, and decode-add. Host API only; this header never includes CUDA headers, so code that
// is not GPU code can include it. Each kernel has a CPU reference in common/codec and produces the
// same elements, values and residuals (tests/codec/cuda_*_test.cc check it).
//
// Conventions:
//  - Pointers named d_* or documented "device" are device memory; all work is enqueued on
//    `stream` (a cudaStream_t passed as void*; nullptr is the legacy default stream) and returns
//    without waiting. Nothing here synchronizes with the host. Returned Statuses report launch and
//    argument errors only; results land on the device.
//  - The one host synchronization of a sparse push is reading the selected count to size the
//    frame: CountReader copies it asynchronously into pinned memory and waits on an event.
//  - Thread-safety: a SelectWorkspace serves one stream at a time (calls using it must be ordered
//    on one stream); distinct workspaces may be used concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/codec/codec_config.h"
#include "common/codec/encoded.h"
#include "common/codec/radix_select.h"
#include "common/codec/sparse_codecs.h"
#include "common/status.h"

namespace osprey::cuda {

// Number of visible CUDA devices; 0 when there is none or no driver (never an error).
int DeviceCount();

// Owning device allocation (cudaMalloc / cudaFree). Move-only. Allocate(0) holds nothing (data() null).
class DeviceBuffer {
 public:
  // Errors: ResourceExhausted when the device is out of memory, Internal for other CUDA errors.
  static StatusOr<DeviceBuffer> Allocate(size_t bytes);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Owning page-locked host allocation (cudaMallocHost / cudaFreeHost): the source or target of
// asynchronous copies. Move-only. Allocate(0) holds nothing (data() null).
class PinnedBuffer {
 public:
  // Errors: ResourceExhausted when no pinned memory is left, Internal for other CUDA errors.
  static StatusOr<PinnedBuffer> Allocate(size_t bytes);

  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// One tensor's error-feedback inputs, all device pointers of n floats, borrowed for the call.
struct EfTensor {
  const float* grad = nullptr;  // g; read only
  float* residual = nullptr;    // r; null: no error feedback (g is compressed as is)
  float* momentum = nullptr;    // u (DGC momentum correction); null: off. Needs residual.
  float momentum_factor = 0.0f;
  size_t n = 0;                 // < 2^32
};
// p, the vector that is compressed: with momentum u = fma(m, u, g), p = r + u; else p = g + r;
// without residual p = g. Kernels write u and r = p - decoded(sent part) back, in one pass.

// Where a sparse pipeline writes its frame payload (layout of common/codec/encoded.h:
// count x u32 index, then count x value). Device memory, capacity * (4 + ValueBytes) bytes.
struct SparseOutput {
  void* payload = nullptr;
  size_t capacity = 0;  // most pairs the payload holds
  codec::ValueType value_type = codec::ValueType::kFp32;
};

// Device scratch of the top-k pipelines: selection state, digit histograms, candidate pairs and
// sample keys. Create once per tensor stream and reuse (no allocation per call). Owns its device
// memory.
class SelectWorkspace {
 public:
  struct Impl;

  // max_n: largest tensor; candidate_capacity: candidate pairs kept (beyond it the pipelines
  // fall back to extra passes over the dense vector, slower but still correct); max_samples:
  // largest SamplePlan::samples used. Synchronizes the device once (setup only). After any error
  // of a pipeline using it, recreate the workspace. Errors: ResourceExhausted, Internal.
  static StatusOr<std::unique_ptr<SelectWorkspace>> Create(size_t max_n, size_t candidate_capacity,
                                                           size_t max_samples);
  ~SelectWorkspace();

  // Device u32: pairs written by the last pipeline run on this workspace (valid once its stream
  // reaches that point).
  const uint32_t* device_count() const;

  Impl& impl() { return *impl_; }

 private:
  explicit SelectWorkspace(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A candidate capacity that makes the fallback rare: twice the largest count plus slack.
size_t RecommendedCandidateCapacity(size_t n, uint64_t k_hi);

// Fused EF + select with a given threshold (device float): sends every element with
// |p| >= *d_threshold (magnitude-key order; NaN counts as largest). If more than out.capacity pass,
// an arbitrary out.capacity of them are sent and the rest stay in the residual.
// Reference: codec::Selection{window_lo = key(threshold), key = key(threshold)}.
Status SelectByThreshold(const EfTensor& t, const float* d_threshold, const SparseOutput& out, SelectWorkspace* ws,
                         void* stream);

// Top-k parameters of one call, from the codec configuration (see MakeTopKParams).
struct TopKParams {
  codec::TopKMethod method = codec::TopKMethod::kExact;
  codec::SelectTargets targets;  // exact: k_lo == k_hi == k
  codec::SamplePlan plan;        // exact and sample
  uint64_t seed = 0;             // StepSeed(config seed ^ tensor seed, step)
};
TopKParams MakeTopKParams(codec::TopKMethod method, size_t n, double density, double count_tolerance,
                          double sample_rate, uint64_t seed);
// The parameters of encode step `step` of a tensor under `config` (validated, type "topk"): the
// scheduled density and the seed the CPU TopKCodec would use, so both select the same elements.
TopKParams TopKParamsFor(const codec::CodecConfig& config, size_t n, uint64_t step, uint64_t tensor_seed);

// Fused EF + top-k; the count stays on the device (ws->device_count()).
//  exact:     sampled window + one fused pass + radix select on the candidates (tolerance 0);
//             exactly k, ties to the lowest index. Reference: codec::SelectExact.
//  sample:    the same with tolerance. Reference: codec::SelectSampled.
//  histogram: fused pass building the 12-bit log-magnitude histogram, one collecting pass over
//             p, radix refinement in the boundary bin. Reference: codec::RadixSelect.
// Needs out.capacity >= targets.k_hi. Errors: InvalidArgument for bad sizes or pointers.
Status TopK(const EfTensor& t, const TopKParams& params, const SparseOutput& out, SelectWorkspace* ws, void* stream);

// Fused EF + one-bit pack into d_payload (layout of encoded.h; chunk a positive multiple of 32).
// Reference: codec::OneBitPack on p, residual r = p -+ scale.
Status OneBitEncode(const EfTensor& t, uint32_t chunk, void* d_payload, void* stream);

// Fused EF + cast of every element to fp16/bf16 (or fp32 copy) into d_payload.
Status CastEncode(const EfTensor& t, codec::ValueType type, void* d_payload, void* stream);

// Decode-add of a frame already in device memory: validates on the device (indices < n; one-bit
// padding bits zero), writes the number of problems to *d_bad (device u32, zeroed here first), and
// adds scale * decoded into d_dst only if there were none: a bad frame changes nothing. Host-side
// checks (sizes, codec, chunk) return InvalidArgument. Sparse adds use atomics, so duplicate
// indices are summed; values round exactly as codec::DecodeAddFrame for distinct indices.
// payload_bytes is the received frame size, checked against meta like codec::ValidateMeta.
Status DecodeAdd(const codec::EncodedMeta& meta, const void* d_payload, size_t payload_bytes, float* d_dst, size_t n,
                 float scale, uint32_t* d_bad, void* stream);

// Reads one device u32 (a selected count, a bad-frame counter) without blocking the stream:
// Start enqueues a copy into pinned host memory plus an event; Wait blocks on the event.
class CountReader {
 public:
  static StatusOr<std::unique_ptr<CountReader>> Create();
  ~CountReader();

  Status Start(const uint32_t* d_value, void* stream);
  // Errors: FailedPrecondition without a Start; Internal for CUDA errors of the stream.
  StatusOr<uint32_t> Wait();

 private:
  CountReader() = default;
  uint32_t* host_ = nullptr;  // pinned
  void* event_ = nullptr;     // cudaEvent_t
  bool started_ = false;
};

}  // namespace osprey::cuda
