// DenseCompressor: compresses a worker's dense pushes with the table's codec (tables[].codec); the
// client's PushEncoder for a dense table (worker/client/push_encoder.h).
//
// The client cuts a dense push into one message per server (the chunks that server owns); each
// message is one encode stream with its own codec::CodecState, keyed by (table, server), so the
// error-feedback residual of server 0's chunks never mixes with server 1's. Messages smaller than
// the config's min_compress_bytes go out as plain fp32 (codec none): compressing them would save
// fewer bytes than the frame overhead. Granularity "tensor": the message is the tensor (one k for
// the message). "bucket": the message is cut into units of bucket_bytes, each with its own state
// and its own k, and the units' frames are merged into the message's one values frame (indices
// shifted by the unit's offset); onebit then needs bucket_bytes / 4 to be a multiple of
// onebit_chunk so chunk scales line up. "layer": the units are the model's tensors
// (codec::TensorLayout) as they fall into the message (codec::LayerSegments), each with
// k_l = max(layer_min_k, density x size_l), so a small layer is not starved by a large one.
//
//   OSPREY_ASSIGN_OR_RETURN(DenseCompressor* comp, SetTableCodecs(job.tables[i], table, rank, &client));
//   ... comp->stats() ...   // comp is owned by the client
//
// Ownership: owns the codec stack and every stream's state (residuals, scratch, last payload's
// capacity); the client owns the compressor once it is set as a table's encoder.
// Thread-safety: every method may be called from any thread; Encode calls are serialized by an
// internal mutex (the client encodes on the thread that issues the push, so in practice there is
// one caller and the lock is uncontended).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/tensor_layout.h"
#include "job/job_config.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "worker/client/client.h"
#include "worker/client/push_encoder.h"
#include "worker/compression_diagnostics.h"

namespace osprey::worker {

// The density of one encode step: selected / length over the compressed messages of that step
// (one per server stream; a stream's n-th compressed message is its step n, counted from 0).
struct DensityPoint {
  uint64_t step = 0;
  double density = 0;
};

// At most kMaxTrajectoryPoints points of the run, evenly spaced and always including step 0 and the
// last step: steps 0, s, 2s, ... (s doubles whenever more than kMaxTrajectoryPoints - 1 would be
// kept, so memory stays bounded however long the run) plus the last step seen.
inline constexpr size_t kMaxTrajectoryPoints = 8;

struct CompressionStats {
  uint64_t messages = 0;             // dense push messages that went through the encoder
  uint64_t compressed_messages = 0;  // ... of which were sent with the lossy codec
  uint64_t bytes_raw = 0;            // fp32 bytes of those messages before encoding
  uint64_t bytes_encoded = 0;        // values-frame bytes actually sent for them
  double encode_seconds = 0;         // wall time inside Codec::Encode (select + EF + pack)
  double last_density = 1.0;         // count / length of the latest compressed message
  std::vector<DensityPoint> density_trajectory;  // see kMaxTrajectoryPoints; empty if none
  // Per-layer norms, cosine and starved layers of the compressed messages (by the model's
  // tensors when the compressor has a layout, else one "dense" tensor); see
  // compression_diagnostics.h. steps 0: no compressed message yet.
  DiagnosticsSummary diagnostics;
};

class DenseCompressor;

// Sets the encoders of `table` on `client` from its config (`table` is that config's table id):
//   sparse table: its pushed rows' wire type from tables[].codec and its pulled rows' from
//                 tables[].pull_codec (each none, fp16 or bf16; the config loader refuses the
//                 others, and so does this, for configs built in code); returns nullptr.
//   dense table:  a DenseCompressor built from tables[].codec with `seed` and the model's
//                 `layout` of the table's floats (needed by granularity "layer"; may be empty
//                 otherwise) (none: no encoder is set), returned so the caller can read its
//                 stats(); the client owns it.
// Errors: InvalidArgument from the codecs or the client (unknown table), or a layout that does
// not cover the table (codec::ValidateTensorLayout).
StatusOr<DenseCompressor*> SetTableCodecs(const config::TableConfig& config, uint32_t table, uint64_t seed,
                                          Client* client, const codec::TensorLayout& layout = {});

class DenseCompressor final : public PushEncoder {
 public:
  using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;  // (first table float, floats)

  // `config` must have passed codec::ValidateCodecConfig (LoadJobConfig does that); `seed` makes
  // this worker's random draws (random-k, sampled thresholds) differ from other workers'.
  // `layout`: the tensors of the table's floats (table coordinates); granularity "layer" needs it.
  // Errors: InvalidArgument from MakeCodec, for onebit buckets that split a chunk, or for
  // granularity "layer" without a layout.
  static StatusOr<std::unique_ptr<DenseCompressor>> Create(const codec::CodecConfig& config, uint64_t seed,
                                                           codec::TensorLayout layout = {});

  // Refuses sparse tables (their rows are cast, never sparsified: MakeRowCastEncoder).
  Status CheckTable(const proto::TableSpec& table) const override;

  // Encodes one dense push message (the chunks of in.table that server in.server owns) into
  // *values and sets header codec, codec_value_type, codec_count and codec_chunk. The floats are
  // read where they lie (chunks that are not contiguous are gathered once); a message below
  // min_compress_bytes goes as plain fp32 (a view of the caller's Buffer when it has one). A
  // one-unit payload is handed over without a copy; bucketed units are merged with one copy.
  // Errors: the codec's.
  Status Encode(const PushValues& in, proto::Header* header, Buffer* values) override EXCLUDES(mu_);
  // The same for the n contiguous floats at grad.
  Status Encode(uint32_t table, int server, const float* grad, size_t n, proto::Header* header,
                Buffer* values) EXCLUDES(mu_);

  // The seam of an encoder that runs elsewhere but books its messages here (the GPU worker's
  // device path, worker/gpu/device_encoder.h), so stats(), warning() and the diagnostics read the
  // same whichever path encoded. StartExternal (re)starts stream (table, server) for a compressed
  // message of n floats at `ranges` when it is not at those already (as Encode does) and returns
  // the message positions whose raw values RecordExternal needs (the diagnostics' samples).
  std::vector<uint32_t> StartExternal(uint32_t table, int server, const Ranges& ranges, size_t n) EXCLUDES(mu_);
  // Books one message of (table, server) sent as `frame`: codec none (a message below
  // min_compress_bytes, samples unused), or a compressed frame with the raw gradient at
  // StartExternal's positions in samples[0, num_samples) and the wall time its encode took.
  // Errors: the diagnostics' (a stream not started, a frame that does not validate).
  Status RecordExternal(uint32_t table, int server, size_t n, const codec::EncodedView& frame, const float* samples,
                        size_t num_samples, double encode_seconds) EXCLUDES(mu_);
  const codec::CodecConfig& config() const { return config_; }
  const codec::TensorLayout& layout() const { return layout_; }
  // Adaptive per-node ratio (codec.adaptive_ratio, worker/adaptive_ratio.h): from the next
  // encode on, every unit sends density x (its schedule's density / config density) -- the
  // schedule keeps its shape, `density` replaces its end point -- and, with cheap_select, top-k
  // selects with the sampled threshold (topk_method sample, the config's sample_rate and
  // count_tolerance) instead of exactly; the error-feedback residual carries over unchanged.
  // `density` must be in (0, 1]. cheap_select needs the compressor to have been created with
  // adaptive_ratio enabled and topk exact (it is ignored otherwise).
  void SetAdaptive(double density, bool cheap_select) EXCLUDES(mu_);

  CompressionStats stats() const EXCLUDES(mu_);
  // stats().encode_seconds without building the rest (the adaptive ratio reads it every step).
  double encode_seconds() const EXCLUDES(mu_);
  // CompressionWarning of the current diagnostics ("" when healthy); cheap enough for heartbeats.
  std::string warning() const EXCLUDES(mu_);

 private:

  DenseCompressor(const codec::CodecConfig& config, std::unique_ptr<codec::Codec> codec,
                  std::unique_ptr<codec::Codec> cheap, uint64_t seed, codec::TensorLayout layout)
      : config_(config),
        codec_(std::move(codec)),
        cheap_codec_(std::move(cheap)),
        seed_(seed),
        layout_(layout),
        diagnostics_(std::move(layout)) {}

  struct Unit {
    codec::CodecState state;
    codec::Encoded encoded;
    size_t begin = 0;  // message floats [begin, begin + size)
    size_t size = 0;
  };
  struct Stream {
    Ranges ranges;      // where the message lies in the table (a change restarts the stream)
    size_t length = 0;  // floats of the message this stream encodes
    uint64_t step = 0;  // compressed messages encoded so far (the next one's step)
    std::vector<Unit> units;
  };
  // Selected and total elements of the messages of one encode step.
  struct StepCount {
    uint64_t selected = 0;
    uint64_t length = 0;
  };

  // Compresses grad[0, n), the table floats `ranges`, as the message of (table, server).
  Status EncodeLocked(uint32_t table, int server, const Ranges& ranges, const float* grad, size_t n,
                      proto::Header* header, Buffer* values) REQUIRES(mu_);
  // (Re)starts `st` for a message of n floats at `ranges`: its units and their seeds.
  void StartStream(uint32_t table, int server, const Ranges& ranges, size_t n, Stream* st) const;
  // Adds one compressed message of `step` to the trajectory samples.
  void RecordDensity(uint64_t step, uint64_t selected, uint64_t length) REQUIRES(mu_);

  // Encodes grad[0, n) unit by unit into st's units and builds the message frame.
  Status EncodeUnits(Stream* st, const float* grad, size_t n, codec::EncodedMeta* meta,
                     Buffer* values) REQUIRES(mu_);

  const codec::CodecConfig config_;
  const std::unique_ptr<codec::Codec> codec_;
  const std::unique_ptr<codec::Codec> cheap_codec_;  // adaptive_ratio's sampled top-k; may be null
  const uint64_t seed_;
  const codec::TensorLayout layout_;

  mutable Mutex mu_;
  std::map<std::pair<uint32_t, int>, Stream> streams_ GUARDED_BY(mu_);
  CompressionStats stats_ GUARDED_BY(mu_);
  uint64_t stride_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, StepCount> samples_ GUARDED_BY(mu_);  // steps % stride_ == 0
  uint64_t last_step_ GUARDED_BY(mu_) = 0;
  StepCount last_ GUARDED_BY(mu_);                         // of last_step_
  std::vector<float> gather_ GUARDED_BY(mu_);              // non-contiguous messages, gathered
  CompressionDiagnostics diagnostics_ GUARDED_BY(mu_);
  double density_scale_ GUARDED_BY(mu_) = 1.0;  // SetAdaptive's density / config density
  bool cheap_select_ GUARDED_BY(mu_) = false;
};

}  // namespace osprey::worker
