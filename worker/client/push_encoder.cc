#include "worker/client/push_encoder.h"

#include <cstring>
#include <string>

#include "common/codec/encoded.h"
#include "common/codec/row_cast.h"
#include "worker/client/push_parts.h"

namespace osprey::worker {

PushValues PushValues::Part(size_t begin_key, size_t end_key, size_t first_float, size_t part_floats) const {
  PushValues p = *this;
  p.floats = part_floats;
  if (rows != nullptr) {
    p.rows = rows + begin_key;
    p.num_rows = end_key - begin_key;
  } else if (ranges != nullptr) {
    p.ranges = ranges + begin_key;
    p.num_ranges = end_key - begin_key;
  } else {
    p.base = base + first_float;
    p.first = first + first_float;
    if (!frame.empty()) p.frame = frame.Slice(first_float * sizeof(float), part_floats * sizeof(float));
  }
  return p;
}

bool PushValues::AllFinite() const {
  bool finite = true;
  ForEachPiece([&](const float* p, size_t n) { finite = finite && AllFiniteFloats(p, n); });
  return finite;
}

void PushValues::CopyTo(float* dst) const {
  ForEachPiece([&](const float* p, size_t n) {
    std::memcpy(dst, p, n * sizeof(float));
    dst += n;
  });
}

Buffer PushValues::Fp32Frame() const {
  if (!frame.empty() || floats == 0) return frame;
  Buffer out = Buffer::Allocate(floats * sizeof(float));
  CopyTo(reinterpret_cast<float*>(out.mutable_data()));
  return out;
}

namespace {

// Casts sparse rows to fp16 / bf16 as it gathers them; fp32 rows go as they are.
class RowCastEncoder final : public PushEncoder {
 public:
  explicit RowCastEncoder(proto::Codec codec)
      : codec_(codec),
        type_(codec == proto::CODEC_FP16   ? codec::ValueType::kFp16
              : codec == proto::CODEC_BF16 ? codec::ValueType::kBf16
                                           : codec::ValueType::kFp32) {}

  Status CheckTable(const proto::TableSpec& table) const override {
    if (table.type() == proto::TABLE_SPARSE) return Status::OK();
    return InvalidArgument("table '" + table.name() + "' is dense; row casts are for the sparse calls");
  }

  Status Encode(const PushValues& in, proto::Header* header, Buffer* values) override {
    if (type_ == codec::ValueType::kFp32) {
      *values = in.Fp32Frame();
      return Status::OK();
    }
    header->set_codec(codec_);
    header->set_codec_count(in.floats);
    header->set_codec_value_type(static_cast<uint32_t>(type_));
    *values = Buffer::Allocate(in.floats * codec::RowValueBytes(type_));
    uint8_t* dst = values->mutable_data();
    in.ForEachPiece([&](const float* p, size_t n) { dst += codec::CastRowValues(p, n, type_, dst); });
    return Status::OK();
  }

  bool EncodesPartsAlone() const override { return true; }

 private:
  const proto::Codec codec_;
  const codec::ValueType type_;
};

}  // namespace

StatusOr<std::unique_ptr<PushEncoder>> MakeRowCastEncoder(proto::Codec codec) {
  if (codec != proto::CODEC_NONE && codec != proto::CODEC_FP16 && codec != proto::CODEC_BF16) {
    return InvalidArgument("rows can be sent as fp32, fp16 or bf16, not with codec " +
                           codec::CodecIdName(static_cast<codec::CodecId>(codec)));
  }
  return std::unique_ptr<PushEncoder>(new RowCastEncoder(codec));
}

}  // namespace osprey::worker
