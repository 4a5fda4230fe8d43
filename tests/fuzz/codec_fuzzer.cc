// libFuzzer target over the codec frame decoder on its own (common/codec/encoded.h), faster than
// going through a server: the input is an EncodedMeta and a payload; ValidateMeta and
// DecodeAddFrame must refuse every inconsistent frame and never read or write out of bounds.
//
// Input layout: u8 codec, u8 value type, u16 LE length, u32 LE count, u32 LE chunk, then the
// payload (the rest).
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/codec/encoded.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace osprey::codec;
  if (size < 12) return 0;
  EncodedView view;
  view.meta.codec = static_cast<CodecId>(data[0]);
  view.meta.value_type = static_cast<ValueType>(data[1]);
  uint16_t length = 0;
  uint32_t count = 0, chunk = 0;
  std::memcpy(&length, data + 2, 2);
  std::memcpy(&count, data + 4, 4);
  std::memcpy(&chunk, data + 8, 4);
  view.meta.length = length;
  view.meta.count = count;
  view.meta.chunk = chunk;
  // The payload in its own allocation, so ASan sees a read past its end.
  std::vector<uint8_t> payload(data + 12, data + size);
  view.data = payload.data();
  view.size = payload.size();
  std::vector<float> dst(length, 0.0f);
  (void)DecodeAddFrame(view, dst.data(), dst.size(), 1.0f);
  return 0;
}
