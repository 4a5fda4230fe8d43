#include "worker/gpu/device_encoder.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/codec/schedule.h"
#include "worker/cuda/cuda_check.cuh"
#include "worker/cuda/layer_kernels.h"
#include "worker/cuda/sparse/sparse_kernels.h"
#include "worker/gpu/step_buffers.h"

namespace osprey::worker::gpu {
namespace {

template <typename T>
Status UploadVector(const std::vector<T>& v, cuda::DeviceBuffer* d, cudaStream_t stream) {
  if (v.empty()) return Status::OK();
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d->data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  return Status::OK();
}

}  // namespace

// One server's message and its device state.
struct DeviceDenseEncoder::Message {
  int server = 0;
  DenseCompressor::Ranges chunks;  // the route's chunks (what DenseCompressor's stream keys on)
  DenseCompressor::Ranges ranges;  // the same, adjacent ones merged (the gather's copies)
  size_t n = 0;
  bool compress = false;                  // n * 4 >= min_compress_bytes
  std::vector<uint32_t> begin, sizes;     // the units: message floats [begin[u], begin[u + 1])
  std::vector<uint32_t> ks, outs;         // of the current density
  double density = -1;                    // the density ks were made for
  uint64_t min_k = 1;
  uint64_t capacity = 0;                  // pairs the payload buffers hold
  uint64_t step = 0;                      // compressed messages encoded (the schedule's step)
  std::vector<uint32_t> positions;        // the diagnostics' samples
  cuda::DeviceBuffer d_msg, d_residual, d_momentum, d_begin, d_k, d_out, d_payload, d_positions, d_samples;
  std::unique_ptr<cuda::LayerTopKWorkspace> ws;
  cuda::PinnedBuffer h_payload[kSlots], h_samples[kSlots];
  uint64_t count[kSlots] = {};
  bool pending[kSlots] = {};
  cudaEvent_t start[kSlots] = {}, end[kSlots] = {};

  ~Message() {
    for (int s = 0; s < kSlots; ++s) {
      if (start[s]) cudaEventDestroy(start[s]);
      if (end[s]) cudaEventDestroy(end[s]);
    }
  }
};

DeviceDenseEncoder::DeviceDenseEncoder(DenseCompressor* compressor, uint32_t table)
    : compressor_(compressor), table_(table) {}
DeviceDenseEncoder::~DeviceDenseEncoder() = default;

std::vector<int> DeviceDenseEncoder::servers() const {
  std::vector<int> out;
  for (const auto& m : messages_) out.push_back(m->server);
  return out;
}

DeviceDenseEncoder::Message* DeviceDenseEncoder::Find(int server) {
  for (auto& m : messages_) {
    if (m->server == server) return m.get();
  }
  return nullptr;
}

StatusOr<std::unique_ptr<DeviceDenseEncoder>> DeviceDenseEncoder::Create(DenseCompressor* compressor, uint32_t table,
                                                                         const std::vector<DenseRoute>& routes,
                                                                         uint32_t chunk) {
  const codec::CodecConfig& c = compressor->config();
  if (std::string why = DeviceEncodeUnsupported(c); !why.empty()) return InvalidArgument("device encode: " + why);
  std::unique_ptr<DeviceDenseEncoder> enc(new DeviceDenseEncoder(compressor, table));
  const size_t vbytes = codec::ValueBytes(codec::ValueTypeOfName(c.value_type));
  // The largest density any step may ask for: a schedule starts above the final density.
  const double max_density = std::max(c.density, c.schedule.type == "none" ? 0.0 : c.schedule.start_density);
  for (const DenseRoute& r : routes) {
    auto m = std::make_unique<Message>();
    m->server = r.server;
    // As the client hands DenseCompressor the message: one range when the chunks are contiguous.
    m->chunks = r.contiguous && !r.ranges.empty() ? DenseCompressor::Ranges{{r.ranges[0].first, r.floats}} : r.ranges;
    for (const auto& [first, len] : r.ranges) {
      if (!m->ranges.empty() && m->ranges.back().first + m->ranges.back().second == first) {
        m->ranges.back().second += len;
      } else {
        m->ranges.emplace_back(first, len);
      }
    }
    m->n = r.floats;
    if (m->n >= (size_t{1} << 32)) {
      return InvalidArgument("device encode: server " + std::to_string(r.server) + "'s message of " +
                             std::to_string(m->n) + " floats exceeds u32 indices");
    }
    m->compress = m->n > 0 && m->n * sizeof(float) >= c.min_compress_bytes;
    // A message that is one run of the table is read in place; others are gathered.
    if (m->ranges.size() > 1) OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&m->d_msg, m->n, "device encode: message"));
    for (int s = 0; s < kSlots; ++s) {
      OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&m->start[s]));
      OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&m->end[s]));
    }
    if (!m->compress) {  // plain fp32 frames: the message itself is copied
      for (int s = 0; s < kSlots; ++s) {
        OSPREY_RETURN_IF_ERROR(AllocatePinned<float>(&m->h_payload[s], m->n, "device encode: fp32 frame"));
      }
      enc->messages_.push_back(std::move(m));
      continue;
    }
    // The units, as DenseCompressor::StartStream cuts the message.
    m->begin = {0};
    if (c.granularity == "layer") {
      for (const codec::LayerSegment& seg : codec::LayerSegments(compressor->layout(), m->chunks)) {
        m->begin.push_back(static_cast<uint32_t>(seg.begin + seg.size));
      }
      m->min_k = c.layer_min_k;
    } else {
      const size_t unit = c.granularity == "bucket" ? std::max<size_t>(1, c.bucket_bytes / sizeof(float)) : m->n;
      for (size_t b = unit; b < m->n; b += unit) m->begin.push_back(static_cast<uint32_t>(b));
      m->begin.push_back(static_cast<uint32_t>(m->n));
    }
    for (size_t u = 0; u + 1 < m->begin.size(); ++u) m->sizes.push_back(m->begin[u + 1] - m->begin[u]);
    for (uint32_t k : cuda::LayerKs(m->sizes, max_density, m->min_k)) m->capacity += k;
    const size_t units = m->sizes.size();
    OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&m->d_residual, m->n, "device encode: residual"));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemset(m->d_residual.data(), 0, m->n * sizeof(float)));
    if (c.dgc_momentum > 0.0f) {
      OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&m->d_momentum, m->n, "device encode: momentum"));
      OSPREY_CUDA_RETURN_IF_ERROR(cudaMemset(m->d_momentum.data(), 0, m->n * sizeof(float)));
    }
    OSPREY_RETURN_IF_ERROR(AllocateDevice<uint32_t>(&m->d_begin, units + 1, "device encode: units"));
    OSPREY_RETURN_IF_ERROR(AllocateDevice<uint32_t>(&m->d_k, units, "device encode: k"));
    OSPREY_RETURN_IF_ERROR(AllocateDevice<uint32_t>(&m->d_out, units + 1, "device encode: k offsets"));
    const size_t payload_bytes = m->capacity * (4 + vbytes);
    OSPREY_RETURN_IF_ERROR(AllocateDevice<uint8_t>(&m->d_payload, payload_bytes, "device encode: payload"));
    for (int s = 0; s < kSlots; ++s) {
      OSPREY_RETURN_IF_ERROR(AllocatePinned<uint8_t>(&m->h_payload[s], payload_bytes, "device encode: payload"));
    }
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpy(m->d_begin.data(), m->begin.data(), m->begin.size() * sizeof(uint32_t),
                                           cudaMemcpyHostToDevice));
    OSPREY_ASSIGN_OR_RETURN(m->ws, cuda::LayerTopKWorkspace::Create(m->begin, chunk));
    // The diagnostics read the raw gradient at these positions only: gathered on the device.
    m->positions = compressor->StartExternal(table, m->server, m->chunks, m->n);
    OSPREY_RETURN_IF_ERROR(AllocateDevice<int32_t>(&m->d_positions, m->positions.size(), "device encode: samples"));
    OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&m->d_samples, m->positions.size(), "device encode: samples"));
    for (int s = 0; s < kSlots; ++s) {
      OSPREY_RETURN_IF_ERROR(AllocatePinned<float>(&m->h_samples[s], m->positions.size(), "device encode: samples"));
    }
    if (!m->positions.empty()) {
      OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpy(m->d_positions.data(), m->positions.data(),
                                             m->positions.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
    }
    enc->messages_.push_back(std::move(m));
  }
  OSPREY_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return enc;
}

Status DeviceDenseEncoder::Enqueue(int server, const float* d_grad, int slot, void* stream) {
  Message* m = Find(server);
  if (m == nullptr || slot < 0 || slot >= kSlots) {
    return InvalidArgument("device encode: no message for server " + std::to_string(server) + " slot " +
                           std::to_string(slot));
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  // The message's floats: in place when it is one run, else its runs back to back in d_msg.
  const float* msg = d_grad + (m->ranges.empty() ? 0 : m->ranges[0].first);
  if (m->ranges.size() > 1) {
    size_t at = 0;
    for (const auto& [first, len] : m->ranges) {
      OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m->d_msg.as<float>() + at, d_grad + first, len * sizeof(float),
                                                  cudaMemcpyDeviceToDevice, s));
      at += len;
    }
    msg = m->d_msg.as<float>();
  }
  m->pending[slot] = true;
  if (!m->compress) {
    m->count[slot] = m->n;
    OSPREY_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(m->h_payload[slot].data(), msg, m->n * sizeof(float), cudaMemcpyDeviceToHost, s));
    return Status::OK();
  }
  const codec::CodecConfig& c = compressor_->config();
  const double density = codec::DensitySchedule(c.schedule, c.density).DensityAt(m->step);
  if (density != m->density) {
    // The schedule moved: new k per unit. Uploaded from pageable memory, which the runtime stages
    // before the call returns, so the host vectors may change at the next step; this waits for
    // the stream's earlier work, which only schedule steps pay.
    m->density = density;
    m->ks = cuda::LayerKs(m->sizes, density, m->min_k);
    m->outs = {0};
    for (uint32_t k : m->ks) m->outs.push_back(m->outs.back() + k);
    if (m->outs.back() > m->capacity) {
      return Internal("device encode: density " + std::to_string(density) + " needs " +
                      std::to_string(m->outs.back()) + " pairs, " + std::to_string(m->capacity) + " allocated");
    }
    OSPREY_RETURN_IF_ERROR(UploadVector(m->ks, &m->d_k, s));
    OSPREY_RETURN_IF_ERROR(UploadVector(m->outs, &m->d_out, s));
  }
  ++m->step;
  const uint64_t total = m->outs.back();
  m->count[slot] = total;
  cuda::EfTensor t;
  t.grad = msg;
  t.residual = c.error_feedback ? m->d_residual.as<float>() : nullptr;
  t.momentum = c.dgc_momentum > 0.0f ? m->d_momentum.as<float>() : nullptr;
  t.momentum_factor = c.dgc_momentum;
  t.n = m->n;
  const cuda::LayerTopKArgs layers{m->d_begin.as<uint32_t>(), m->d_k.as<uint32_t>(), m->d_out.as<uint32_t>(),
                                   static_cast<uint32_t>(m->sizes.size()), total};
  const codec::ValueType type = codec::ValueTypeOfName(c.value_type);
  const cuda::SparseOutput out{m->d_payload.data(), static_cast<size_t>(m->capacity), type};
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(m->start[slot], s));
  OSPREY_RETURN_IF_ERROR(cuda::LayerTopK(t, layers, out, m->ws.get(), s));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventRecord(m->end[slot], s));
  // The kernel writes count indices, then the values right after them (the frame's layout).
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m->h_payload[slot].data(), m->d_payload.data(),
                                              total * (4 + codec::ValueBytes(type)), cudaMemcpyDeviceToHost, s));
  if (!m->positions.empty()) {
    OSPREY_RETURN_IF_ERROR(cuda::GatherRows(msg, m->d_positions.as<int32_t>(),
                                            static_cast<int>(m->positions.size()), 1, m->d_samples.as<float>(), s));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(m->h_samples[slot].data(), m->d_samples.data(),
                                                m->positions.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  }
  return Status::OK();
}

StatusOr<EncodedDenseFrame> DeviceDenseEncoder::Take(int server, int slot) {
  Message* m = Find(server);
  if (m == nullptr || slot < 0 || slot >= kSlots || !m->pending[slot]) {
    return FailedPrecondition("device encode: nothing enqueued for server " + std::to_string(server) + " slot " +
                              std::to_string(slot));
  }
  m->pending[slot] = false;
  EncodedDenseFrame f;
  f.server = server;
  f.meta.length = m->n;
  f.meta.count = m->count[slot];
  double seconds = 0;
  if (m->compress) {
    f.meta.codec = codec::CodecId::kTopK;
    f.meta.value_type = codec::ValueTypeOfName(compressor_->config().value_type);
    float ms = 0;
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, m->start[slot], m->end[slot]));
    seconds = ms * 1e-3;
  }
  const size_t bytes = codec::PayloadBytes(f.meta);
  f.payload = Buffer::Copy(m->h_payload[slot].data(), bytes);
  OSPREY_RETURN_IF_ERROR(compressor_->RecordExternal(table_, server, m->n,
                                                     codec::EncodedView{f.meta, f.payload.data(), f.payload.size()},
                                                     m->h_samples[slot].as<float>(), m->positions.size(), seconds));
  return f;
}

}  // namespace osprey::worker::gpu
