// PushEncoder: the one per-table mechanism that turns the fp32 values of a push message into the
// values frame the server decodes. The client calls a table's encoder once per server message,
// for sparse rows and dense chunks alike (Client::SetEncoder):
//
//   fp32 (no encoder set): the floats as they are; a view of the caller's Buffer when they are
//                          one contiguous slice of it (zero-copy), else one gather copy.
//   MakeRowCastEncoder:    sparse rows cast to fp16 / bf16 while they are gathered (one pass).
//   DenseCompressor:       dense messages through common/codec's Codec stack (worker/compression.h).
//
// What an encoder sees is a PushValues: where the message's floats lie in the caller's memory
// (one contiguous run, whole rows picked by index, or float ranges), so it can read them in place
// and the client never copies a message only to hand it to an encoder.
//
// Threading: the client calls Encode on the thread that issues the push; calls for different
// servers and tables may come from several threads at once, so an encoder with state serializes
// itself (DenseCompressor does). Encode must not keep pointers into the PushValues.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "common/buffer.h"
#include "common/status.h"
#include "proto/wire.h"

namespace osprey::worker {

// The fp32 values of one push message (one server's share of a push), in one of three layouts;
// the message's floats are the layout's pieces concatenated in order.
struct PushValues {
  uint32_t table = 0;
  int server = 0;
  size_t floats = 0;  // total floats of the message
  const float* base = nullptr;
  // Contiguous layout: the table float that base[0] is (where the message lies in the table).
  uint64_t first = 0;
  // Rows layout (a partitioned sparse push): row rows[i] of row_floats floats at base, i < num_rows.
  const uint32_t* rows = nullptr;
  size_t num_rows = 0;
  size_t row_floats = 0;
  // Ranges layout (dense chunks): base[first, first + len) for each (first, len).
  const std::pair<uint64_t, uint64_t>* ranges = nullptr;
  size_t num_ranges = 0;
  // Contiguous layout (rows == ranges == nullptr): base[0, floats). When these floats are a view
  // of a Buffer the caller handed over, `frame` is that view and may be sent as it is.
  Buffer frame;

  bool contiguous() const { return rows == nullptr && ranges == nullptr; }
  // Calls f(const float* p, size_t n) for each contiguous piece, in order.
  template <typename F>
  void ForEachPiece(F&& f) const {
    if (rows != nullptr) {
      for (size_t i = 0; i < num_rows; ++i) f(base + size_t{rows[i]} * row_floats, row_floats);
    } else if (ranges != nullptr) {
      for (size_t i = 0; i < num_ranges; ++i) f(base + ranges[i].first, static_cast<size_t>(ranges[i].second));
    } else {
      f(base, floats);
    }
  }
  // Copies the floats, in order, to dst[0, floats).
  void CopyTo(float* dst) const;
  // Keys [begin_key, end_key) of the message (a row or a chunk each), whose floats are
  // [first_float, first_float + part_floats) of it: the same layout over that part only.
  PushValues Part(size_t begin_key, size_t end_key, size_t first_float, size_t part_floats) const;
  // Every float of the message is finite.
  bool AllFinite() const;
  // The floats as one fp32 frame: `frame` when set, else a new Buffer holding a copy.
  Buffer Fp32Frame() const;
};

class PushEncoder {
 public:
  virtual ~PushEncoder() = default;

  // OK when this encoder can encode pushes to `table`; else InvalidArgument naming the table and
  // what the encoder needs (Client::SetEncoder refuses the encoder then).
  virtual Status CheckTable(const proto::TableSpec& table) const = 0;

  // Encodes one message: sets *values to its values frame and records the codec and its meta in
  // *header (codec, codec_value_type, codec_count, codec_chunk; untouched for plain fp32). An
  // error fails the push's ticket (the message is not sent).
  virtual Status Encode(const PushValues& in, proto::Header* header, Buffer* values) = 0;

  // True when a message may be cut into push parts each encoded alone (worker/client/push_parts.h):
  // every value is encoded on its own (no state, no scale or selection over the message), and
  // Encode cannot fail for a table CheckTable accepted, so no part fails after earlier ones left.
  virtual bool EncodesPartsAlone() const { return false; }
};

// Sparse rows sent as `codec`: CODEC_FP16 or CODEC_BF16 (round to nearest even; finite values
// beyond the format's range saturate to its largest finite value; half the bytes; common/codec/
// row_cast.h), or CODEC_NONE (fp32, the same as no encoder). The server decodes them to fp32
// before merging. InvalidArgument for any other codec (rows of a sparse table are never
// sparsified); the encoder refuses dense tables (CheckTable). Stateless and thread-safe.
StatusOr<std::unique_ptr<PushEncoder>> MakeRowCastEncoder(proto::Codec codec);

}  // namespace osprey::worker
