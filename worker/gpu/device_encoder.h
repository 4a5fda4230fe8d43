// DeviceDenseEncoder: the GPU worker's dense compression on the device. For each server message of
// the dense table (the server's chunks, concatenated in table order: dense_routes.h) it keeps the
// error-feedback residual (and DGC momentum) on the device, runs the exact top-k there -- one
// cuda::LayerTopK over the message's units, which are the one message (granularity tensor), its
// bucket_bytes pieces (bucket) or the model's tensors as they fall into the message (layer) -- and
// copies only the selected pairs (indices, then values) to pinned host memory. The frame it hands
// the client (Client::PushDenseEncoded) is byte for byte the one DenseCompressor::Encode makes for
// the same gradient from the same residuals: the same k per unit (cuda::LayerKs from the scheduled
// density), the same elements (exact top-k, ties to the lowest index), indices ascending and
// shifted by the unit's offset, the values of config value_type; a message below
// min_compress_bytes goes as plain fp32, as on the host. tests/worker/device_encoder_test.cc
// checks it over several steps for every granularity.
//
// Why LayerTopK for tensor and bucket too: with one unit (or one per bucket) it is the exact
// top-k of cuda::TopK, but it writes its pairs in ascending index order (an ordered compaction),
// which is the CPU's order; cuda::TopK compacts with atomics, so its frames would need a sort.
//
// Supported (DeviceEncodeUnsupported says why not otherwise): type topk, topk_method exact,
// select magnitude, clip_norm 0, any value_type, error feedback on or off, dgc_momentum, any
// density schedule. Everything else stays on the host (DenseCompressor).
//
// Bookkeeping: every message is booked with the DenseCompressor the encoder borrows
// (DenseCompressor::RecordExternal), so its stats(), density trajectory, warning() and per-layer
// diagnostics read as on the host; the diagnostics' raw-gradient samples (at most
// kDiagnosticsSamples per layer piece) are gathered on the device and copied with the payload.
//
// Use, per step and server: Enqueue(server, d_grad, slot, stream) once the server's chunks of
// d_grad are final on `stream`; record an event after it; once the event completed,
// Take(server, slot). Two slots let step t+1 enqueue while step t's frames are still taken.
//
// Ownership: owns its device and pinned memory; borrows the compressor (it outlives the encoder).
// Thread-safety: Enqueue and Take of one (server, slot) are ordered by the caller (the comm thread
// enqueues, the pusher takes after the event, as for the gradient copies they replace); the
// compressor serializes its own bookkeeping. Create synchronizes the device (setup only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/codec/codec_config.h"
#include "common/status.h"
#include "worker/client/client.h"
#include "worker/compression.h"
#include "worker/gpu/gpu_options.h"

namespace osprey::worker::gpu {

class DeviceDenseEncoder {
 public:
  static constexpr int kSlots = 2;

  // compressor: the table's (its config, seed-independent for exact top-k, and layout drive the
  // encode); routes: the messages to encode (the servers this worker pushes, from
  // Client::dense_routes); chunk: LayerTopKWorkspace's floats per block (0: its own pick; tests
  // pass a small one). Allocates the residuals (zero), momenta and buffers of every route.
  // Errors: InvalidArgument when DeviceEncodeUnsupported(config) is not "" or a message holds
  // 2^32 floats or more; ResourceExhausted / Internal from CUDA.
  static StatusOr<std::unique_ptr<DeviceDenseEncoder>> Create(DenseCompressor* compressor, uint32_t table,
                                                              const std::vector<DenseRoute>& routes,
                                                              uint32_t chunk = 0);
  ~DeviceDenseEncoder();
  DeviceDenseEncoder(const DeviceDenseEncoder&) = delete;
  DeviceDenseEncoder& operator=(const DeviceDenseEncoder&) = delete;

  // Enqueues on `stream` the encode of `server`'s message of d_grad (device, the table's floats)
  // into slot `slot` (0 or 1): gather of its chunks, EF + top-k, the payload's and the samples'
  // copies to pinned memory. Errors: InvalidArgument for a server without a route or a bad slot,
  // Internal when a scheduled density needs more pairs than were allocated, the kernels' launch
  // errors.
  Status Enqueue(int server, const float* d_grad, int slot, void* stream);
  // The frame of the message enqueued last into (server, slot); the stream must have passed that
  // work. Books it with the compressor. Errors: FailedPrecondition without an Enqueue, the
  // compressor's, Internal for CUDA errors of the timing events.
  StatusOr<EncodedDenseFrame> Take(int server, int slot);

  // The servers this encoder has a route for, in route order.
  std::vector<int> servers() const;

 private:
  struct Message;
  DeviceDenseEncoder(DenseCompressor* compressor, uint32_t table);
  Message* Find(int server);

  DenseCompressor* const compressor_;
  const uint32_t table_;
  std::vector<std::unique_ptr<Message>> messages_;
};

}  // namespace osprey::worker::gpu
