#include "server/codec_decode.h"

#include <chrono>
#include <string>

#include "common/codec/encoded.h"

namespace osprey::server {

Status DecodePushValues(const proto::Header& h, const Buffer& values, size_t n_floats,
                        std::vector<float>* out, DecodeStats* stats) {
  Buffer decoded;
  OSPREY_RETURN_IF_ERROR(DecodePushValues(h, values, n_floats, &decoded, stats));
  out->assign(decoded.as<float>(), decoded.as<float>() + n_floats);
  return Status::OK();
}

Status DecodePushValues(const proto::Header& h, const Buffer& values, size_t n_floats, Buffer* out,
                        DecodeStats* stats) {
  auto start = std::chrono::steady_clock::now();
  const std::string what = "compressed push to table " + std::to_string(h.table());
  // The wire ids are wider than codec::CodecId / ValueType: reject before narrowing, so that
  // 256 + 3 does not pass for top-k.
  const int codec_id = static_cast<int>(h.codec());
  if (codec_id < 0 || codec_id > 255) {
    return InvalidArgument(what + ": unknown codec id " + std::to_string(codec_id));
  }
  if (h.codec_value_type() > 255) {
    return InvalidArgument(what + ": unknown value type " + std::to_string(h.codec_value_type()));
  }
  if (h.value_bytes() != values.size()) {
    return InvalidArgument(what + ": values frame has " + std::to_string(values.size()) +
                           " bytes but the header says " + std::to_string(h.value_bytes()));
  }
  codec::EncodedView view;
  view.meta.codec = static_cast<codec::CodecId>(codec_id);
  view.meta.value_type = static_cast<codec::ValueType>(h.codec_value_type());
  view.meta.length = n_floats;
  view.meta.count = h.codec_count();
  view.meta.chunk = h.codec_chunk();
  view.data = values.data();
  view.size = values.size();
  // DecodeFrame validates the whole frame before it writes anything, and *out is a fresh
  // Buffer anyway, so a bad frame can never reach the store.
  *out = Buffer::Allocate(n_floats * sizeof(float));
  Status s = codec::DecodeFrame(view, reinterpret_cast<float*>(out->mutable_data()), n_floats);
  if (!s.ok()) return s.WithContext(what + " (" + std::to_string(n_floats) + " floats)");
  if (stats != nullptr) {
    stats->frames.fetch_add(1, std::memory_order_relaxed);
    stats->bytes_encoded.fetch_add(values.size(), std::memory_order_relaxed);
    stats->bytes_decoded.fetch_add(n_floats * sizeof(float), std::memory_order_relaxed);
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    stats->decode_nanos.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
  }
  return Status::OK();
}

}  // namespace osprey::server
