// Gradient codecs: the interface, the per-tensor state, and the factory.
//
// A Codec turns one float tensor into an Encoded (metadata + one payload frame, encoded.h) and
// adds a decoded frame into a dense float buffer. Lossy refinements are decorators that own the
// codec they wrap: error feedback, DGC momentum correction, clipping. MakeCodec builds the stack a
// CodecConfig describes; nothing registers itself.
//
// Ownership: a Codec owns its inner codec (unique_ptr). A CodecState is owned by the caller, one
// per tensor (or bucket) stream, and borrowed by Encode for the duration of the call.
// Thread-safety: a Codec is immutable after construction; Encode and DecodeAdd may run
// concurrently from several threads provided each concurrent Encode has its own CodecState.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/codec/codec_config.h"
#include "common/codec/encoded.h"
#include "common/codec/radix_select.h"
#include "common/status.h"

namespace osprey::codec {

// What a tensor's encode stream remembers between steps. Fields are sized by the codecs on first
// use (to the tensor length, zero-filled); a state must not be moved to a tensor of another length
// (Encode returns InvalidArgument).
struct CodecState {
  // Set by the caller before the first Encode: makes this tensor's random draws (random-k,
  // sampled threshold) differ from other tensors'.
  uint64_t tensor_seed = 0;
  // Set by the caller: the fewest elements top-k / random-k select (capped at the tensor's
  // length), whatever the density says; granularity "layer" sets it to layer_min_k.
  uint64_t min_k = 1;
  // Set by the caller before any Encode (adaptive per-node ratio, worker/adaptive_ratio.h): top-k
  // and random-k send density(step) x density_scale of the elements (capped at 1), where
  // density(step) is the config's schedule; 1 leaves the schedule alone. Must be > 0.
  double density_scale = 1.0;
  // Completed Encode calls; advanced by the codec MakeCodec returns after each successful Encode;
  // read by density schedules and seeds.
  uint64_t step = 0;
  // Error feedback residual r: what was computed but not yet sent. Empty until first used.
  std::vector<float> residual;
  // DGC momentum u (momentum correction). Empty unless dgc_momentum > 0.
  std::vector<float> momentum;
  // Fisher estimate F of select "importance". Empty otherwise.
  std::vector<float> fisher;

  // Scratch reused across calls so steady-state encoding does not allocate. Not state: the
  // contents are meaningless between calls. `clipped` belongs to the clip decorator, the others
  // to top-k selection.
  std::vector<float> clipped;
  std::vector<float> scores;  // select "importance": the ranking keys
  std::vector<uint32_t> scratch_keys;
  SampleScratch sample_scratch;
};

class Codec {
 public:
  virtual ~Codec() = default;

  // Encodes g[0, n) into *out, replacing its metadata and payload (the payload's capacity is
  // reused). Reads and updates *state (residual, momentum, step). g must not alias state's
  // buffers or out's payload. On error *state is unchanged where that is cheap to guarantee
  // (validation happens first), and *out is unspecified.
  // Errors: InvalidArgument (n >= 2^32, state sized for another length).
  virtual Status Encode(const float* g, size_t n, CodecState* state, Encoded* out) const = 0;

  // Validates `in` completely (codec id is this codec's, length == n, counts agree with the
  // payload size, indices < n, chunk, padding), then adds scale * decoded(in) into dst[0, n)
  // without building a dense copy. A bad frame leaves dst untouched and returns InvalidArgument
  // (wrong codec, wrong length) or DataLoss (inconsistent or truncated payload, bad index).
  virtual Status DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const = 0;
};

// Builds the codec stack for `config` (after ValidateCodecConfig): base codec (none, fp16, bf16,
// topk with its method and density schedule, randomk, onebit), then error feedback, DGC momentum
// and clipping decorators as configured, outermost a step counter.
// Errors: InvalidArgument naming the bad field and value.
StatusOr<std::unique_ptr<Codec>> MakeCodec(const CodecConfig& config);

}  // namespace osprey::codec
