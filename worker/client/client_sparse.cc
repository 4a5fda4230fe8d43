// The sparse calls of Client: Pull, PullByServer, Push and PushByServer (raw pointers or Buffers), all cut by
// server by the one KeyRouter and encoded by the table's PushEncoder; PushCastRows for rows cast by the caller.
#include <cstring>
#include <utility>

#include "common/codec/encoded.h"
#include "common/codec/row_cast.h"
#include "worker/client/client.h"
#include "worker/client/push_parts.h"

namespace osprey::worker {
namespace {

codec::ValueType RowType(proto::Codec codec) {
  switch (codec) {
    case proto::CODEC_FP16: return codec::ValueType::kFp16;
    case proto::CODEC_BF16: return codec::ValueType::kBf16;
    default: return codec::ValueType::kFp32;
  }
}

// One server's pulled rows (as `type`) into the caller's array: row i of the reply goes to the
// call's row positions[i], or, without positions, to row first + i; widened to fp32 (out is
// float), or, with `raw`, copied as they came (out holds `type` values: PullCastRows).
class PulledRowsSink final : public ReplySink {
 public:
  PulledRowsSink(void* out, const KeySlice& slice, size_t dim, codec::ValueType type, bool raw)
      : out_(static_cast<uint8_t*>(out)), positions_(slice.positions), first_(slice.first), dim_(dim), type_(type),
        raw_(raw), out_row_bytes_(dim * (raw ? codec::RowValueBytes(type) : sizeof(float))) {}

  void Deliver(Buffer reply) override {
    const uint8_t* src = reply.data();
    if (positions_.empty()) {  // in call order: one bulk widen or copy
      Put(src, reply.size() / codec::RowValueBytes(type_), out_ + first_ * out_row_bytes_);
      return;
    }
    const size_t row_bytes = dim_ * codec::RowValueBytes(type_);
    const uint32_t* pos = positions_.as<uint32_t>();
    for (size_t i = 0, n = positions_.count<uint32_t>(); i < n; ++i, src += row_bytes) {
      Put(src, dim_, out_ + size_t{pos[i]} * out_row_bytes_);
    }
  }

 private:
  void Put(const uint8_t* src, size_t values, uint8_t* dst) const {
    if (raw_) {
      std::memcpy(dst, src, values * codec::RowValueBytes(type_));
    } else {
      codec::WidenRowValues(src, values, type_, reinterpret_cast<float*>(dst));
    }
  }

  uint8_t* const out_;
  const Buffer positions_;
  const size_t first_, dim_;
  const codec::ValueType type_;
  const bool raw_;
  const size_t out_row_bytes_;
};

// Keys [begin, begin + count) of `slice`, viewing its frames (no copy).
KeySlice PartOf(const KeySlice& slice, size_t begin, size_t count) {
  KeySlice part;
  part.server = slice.server;
  part.count = count;
  part.keys = slice.keys.Slice(begin * sizeof(uint64_t), count * sizeof(uint64_t));
  if (slice.positions.empty()) {
    part.first = slice.first + begin;
  } else {
    part.positions = slice.positions.Slice(begin * sizeof(uint32_t), count * sizeof(uint32_t));
  }
  return part;
}

}  // namespace

Ticket Client::Pull(uint32_t table, const uint64_t* keys, size_t n, float* out, int64_t clock) {
  return SendSparsePull(table, keys, n, out, nullptr, clock);
}

Ticket Client::PullByServer(uint32_t table, const uint64_t* keys, size_t n, float* out, const int32_t* counts,
                            int64_t clock) {
  return SendSparsePull(table, keys, n, out, counts, clock);
}

Status Client::CheckCastRows(uint32_t table, codec::ValueType type, size_t n, const void* rows,
                             const char* what) const {
  OSPREY_RETURN_IF_ERROR(CheckTable(table, /*sparse=*/true));
  const std::string call = std::string(what) + " of cast rows, table '" + map_.tables(table).name() + "': ";
  if (type != codec::ValueType::kFp16 && type != codec::ValueType::kBf16) {
    return InvalidArgument(call + "rows are fp16 or bf16, not " + codec::ValueTypeName(type));
  }
  if (rows == nullptr && n > 0) return InvalidArgument(call + std::to_string(n) + " keys and a null rows array");
  return Status::OK();
}

Ticket Client::PullCastRows(uint32_t table, const uint64_t* keys, size_t n, uint16_t* out, codec::ValueType type,
                            const int32_t* counts, int64_t clock) {
  Status bad = CheckCastRows(table, type, n, out, "pull");
  if (!bad.ok()) return requests_.Open(proto::OP_PULL_SPARSE, table, bad);
  return SendSparsePull(table, keys, n, out, counts, clock, type);
}

Ticket Client::SendSparsePull(uint32_t table, const uint64_t* keys, size_t n, void* out, const int32_t* counts,
                              int64_t clock, codec::ValueType raw) {
  Status bad = CheckTable(table, /*sparse=*/true);
  if (bad.ok() && out == nullptr && n > 0) {
    bad = InvalidArgument("pull of " + std::to_string(n) + " keys from table '" + map_.tables(table).name() +
                          "' into a null array");
  }
  StatusOr<std::vector<KeySlice>> slices = std::vector<KeySlice>();
  if (bad.ok() && counts != nullptr) {
    slices = router_.Grouped(keys, n, counts, /*key_buffer=*/nullptr, map_.tables(table).name(), "pull");
    bad = slices.status();
  }
  Ticket ticket = requests_.Open(proto::OP_PULL_SPARSE, table, bad);
  if (!bad.ok() || n == 0) return ticket;
  if (counts == nullptr) slices = router_.Route(table, keys, n, /*key_buffer=*/nullptr);
  const size_t dim = map_.tables(table).dim();
  proto::Codec pull_codec;
  {
    MutexLock lock(&codec_mu_);
    pull_codec = pull_codecs_[table];
  }
  const bool keep_raw = raw != codec::ValueType::kFp32;  // PullCastRows: the caller widens
  if (keep_raw) pull_codec = raw == codec::ValueType::kBf16 ? proto::CODEC_BF16 : proto::CODEC_FP16;
  const codec::ValueType reply_type = RowType(pull_codec);
  const size_t row_bytes = dim * codec::RowValueBytes(reply_type);
  proto::Header h;
  h.set_op(proto::OP_PULL_SPARSE);
  h.set_table(table);
  h.set_clock(clock);
  for (KeySlice& whole : *slices) {
    // A large reply comes in parts (push_parts.h, "Pulls in parts"): each a pull of a run of the
    // slice's keys, its rows delivered to their own place in `out`.
    const std::vector<size_t> starts =
        RowPartStarts(whole.count, row_bytes, options_.pull_part_bytes, kMaxClientPushParts);
    for (size_t p = 0; p < starts.size(); ++p) {
      const size_t end = p + 1 < starts.size() ? starts[p + 1] : whole.count;
      KeySlice part = starts.size() == 1 ? std::move(whole) : PartOf(whole, starts[p], end - starts[p]);
      if (pull_codec != proto::CODEC_NONE) {  // ask for the rows in 16 bits (the count is in floats)
        h.set_codec(pull_codec);
        h.set_codec_count(part.count * dim);
        h.set_codec_value_type(static_cast<uint32_t>(reply_type));
      }
      auto sink = std::make_unique<PulledRowsSink>(out, part, dim, reply_type, keep_raw);
      Send(ticket, part.server, h, std::move(part.keys), Buffer(), part.count * row_bytes, std::move(sink));
    }
  }
  return ticket;
}

Ticket Client::Push(uint32_t table, const uint64_t* keys, size_t n, const float* grads, int64_t clock,
                    uint64_t version) {
  return SendSparsePush({table, keys, n, grads, nullptr, nullptr, nullptr, clock, version});
}

Ticket Client::PushByServer(uint32_t table, const uint64_t* keys, size_t n, const float* grads,
                            const int32_t* counts, int64_t clock, uint64_t version) {
  return SendSparsePush({table, keys, n, grads, counts, nullptr, nullptr, clock, version});
}

Ticket Client::PushCastRows(uint32_t table, const uint64_t* keys, size_t n, const uint16_t* rows, codec::ValueType type,
                            const int32_t* counts, int64_t clock, uint64_t version) {
  Status bad = CheckCastRows(table, type, n, rows, "push");
  StatusOr<std::vector<KeySlice>> slices = std::vector<KeySlice>();
  if (bad.ok() && counts != nullptr) {
    slices = router_.Grouped(keys, n, counts, /*key_buffer=*/nullptr, map_.tables(table).name());
    bad = slices.status();
  }
  Ticket ticket = requests_.Open(proto::OP_PUSH_SPARSE, table, bad);
  if (!bad.ok() || n == 0) return ticket;
  if (counts == nullptr) slices = router_.Route(table, keys, n, /*key_buffer=*/nullptr);
  const size_t dim = map_.tables(table).dim();
  for (KeySlice& slice : *slices) {
    proto::Header h;
    h.set_op(proto::OP_PUSH_SPARSE);
    h.set_table(table);
    h.set_clock(clock);
    h.set_version(version);
    h.set_codec(type == codec::ValueType::kBf16 ? proto::CODEC_BF16 : proto::CODEC_FP16);
    h.set_codec_count(slice.count * dim);
    h.set_codec_value_type(static_cast<uint32_t>(type));
    Buffer values = Buffer::Allocate(slice.count * dim * sizeof(uint16_t));
    uint16_t* out = reinterpret_cast<uint16_t*>(values.mutable_data());
    if (const uint32_t* at = slice.position_data(); at != nullptr) {  // partitioned: gather the rows
      for (size_t i = 0; i < slice.count; ++i) {
        std::memcpy(out + i * dim, rows + size_t{at[i]} * dim, dim * sizeof(uint16_t));
      }
    } else {
      std::memcpy(out, rows + slice.first * dim, slice.count * dim * sizeof(uint16_t));
    }
    Send(ticket, slice.server, std::move(h), std::move(slice.keys), std::move(values), 0, nullptr);
  }
  return ticket;
}

Status Client::CheckPushBuffers(uint32_t table, const Buffer& keys, const Buffer& rows) const {
  OSPREY_RETURN_IF_ERROR(CheckTable(table, /*sparse=*/true));
  const size_t n = keys.size() / sizeof(uint64_t), dim = map_.tables(table).dim();
  if (keys.size() % sizeof(uint64_t) != 0 || rows.size() != n * dim * sizeof(float)) {
    return InvalidArgument("push to table '" + map_.tables(table).name() + "': " + std::to_string(keys.size()) +
                           " key bytes and " + std::to_string(rows.size()) + " row bytes are not n keys and n * " +
                           std::to_string(dim) + " floats");
  }
  return Status::OK();
}

Ticket Client::Push(uint32_t table, const Buffer& keys, const Buffer& rows, int64_t clock, uint64_t version) {
  Status bad = CheckPushBuffers(table, keys, rows);
  if (!bad.ok()) return requests_.Open(proto::OP_PUSH_SPARSE, table, bad);
  return SendSparsePush({table, keys.as<uint64_t>(), keys.count<uint64_t>(), rows.as<float>(), nullptr, &keys,
                         &rows, clock, version});
}

Ticket Client::PushByServer(uint32_t table, const Buffer& keys, const Buffer& rows, const int32_t* counts,
                            int64_t clock, uint64_t version) {
  Status bad = CheckPushBuffers(table, keys, rows);
  if (!bad.ok()) return requests_.Open(proto::OP_PUSH_SPARSE, table, bad);
  return SendSparsePush({table, keys.as<uint64_t>(), keys.count<uint64_t>(), rows.as<float>(), counts, &keys,
                         &rows, clock, version});
}

Ticket Client::SendSparsePush(const SparsePush& p) {
  Status bad = CheckTable(p.table, /*sparse=*/true);
  StatusOr<std::vector<KeySlice>> slices = std::vector<KeySlice>();
  if (bad.ok() && p.counts != nullptr) {
    slices = router_.Grouped(p.keys, p.n, p.counts, p.key_buffer, map_.tables(p.table).name());
    bad = slices.status();
  }
  Ticket ticket = requests_.Open(proto::OP_PUSH_SPARSE, p.table, bad);
  if (!bad.ok() || p.n == 0) return ticket;
  if (p.counts == nullptr) slices = router_.Route(p.table, p.keys, p.n, p.key_buffer);
  const size_t dim = map_.tables(p.table).dim();
  const std::shared_ptr<PushEncoder> encoder = EncoderOf(p.table);
  for (KeySlice& slice : *slices) {
    PushValues v;
    v.table = p.table;
    v.server = slice.server;
    v.floats = slice.count * dim;
    v.base = p.grads;
    if (!slice.positions.empty()) {  // partitioned: the rows are picked by call index
      v.rows = slice.position_data();
      v.num_rows = slice.count;
      v.row_floats = dim;
    } else {  // one contiguous run of the call's rows
      v.base = p.grads + slice.first * dim;
      if (p.row_buffer != nullptr) v.frame = p.row_buffer->Slice(slice.first * dim * sizeof(float), v.floats * sizeof(float));
    }
    proto::Header h;
    h.set_op(proto::OP_PUSH_SPARSE);
    h.set_table(p.table);
    h.set_clock(p.clock);
    h.set_version(p.version);
    if ((encoder == nullptr || encoder->EncodesPartsAlone()) &&
        SendPushParts(ticket, slice.server, h, slice.keys, v,
                      UniformPartStarts(slice.count, dim, options_.push_part_bytes, kMaxClientPushParts),
                      nullptr, dim, encoder.get())) {
      continue;
    }
    Buffer values;
    if (encoder == nullptr) {
      values = v.Fp32Frame();
    } else if (Status s = encoder->Encode(v, &h, &values); !s.ok()) {
      requests_.Fail(ticket, s);
      return ticket;
    }
    Send(ticket, slice.server, std::move(h), std::move(slice.keys), std::move(values), 0, nullptr);
  }
  return ticket;
}

}  // namespace osprey::worker
