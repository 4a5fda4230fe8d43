// Decoding of compressed push values on the server.
//
// A push whose header says codec != CODEC_NONE carries its values frame in the codec's layout
// (common/codec/encoded.h); the rest of the encoded meta travels in the header (codec_value_type,
// codec_count, codec_chunk) and the decoded length is implied by the keys (sparse: num_keys x dim,
// dense: the listed chunks' floats). DecodePushValues turns such a frame back into fp32 so the
// server applies it exactly like an uncompressed push. Decoding never depends on the worker's
// codec configuration (density, error feedback, schedule), so the server needs none.
//
// Thread-safety: pure functions; DecodeStats is atomic and may be shared by threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "osprey.pb.h"

namespace osprey::server {

// Counters a server keeps about the frames it decoded.
struct DecodeStats {
  std::atomic<uint64_t> frames{0};         // compressed frames decoded successfully
  std::atomic<uint64_t> bytes_encoded{0};  // their values-frame bytes
  std::atomic<uint64_t> bytes_decoded{0};  // the fp32 bytes they decoded to
  std::atomic<uint64_t> decode_nanos{0};   // wall time spent validating and decoding them
};

// Validates the encoded meta of `h` against `values` and a destination of n_floats floats (known
// codec and value type, value_bytes == values.size(), counts and sizes agree, every index <
// n_floats, onebit padding zero) and decodes into *out, a new Buffer of n_floats floats (the
// vector form: resized to n_floats).
// A bad frame returns InvalidArgument (unknown codec or value type, size disagreements) or DataLoss
// (inconsistent or truncated payload, index out of range), with a message naming the table id and
// what was wrong; *out is then unspecified and must not be applied. `stats` (may be null) counts
// successful decodes.
Status DecodePushValues(const proto::Header& h, const Buffer& values, size_t n_floats, Buffer* out,
                        DecodeStats* stats = nullptr);
Status DecodePushValues(const proto::Header& h, const Buffer& values, size_t n_floats,
                        std::vector<float>* out, DecodeStats* stats = nullptr);

}  // namespace osprey::server
