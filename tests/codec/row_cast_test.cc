// The sparse-row casts (common/codec/row_cast.h) against their scalar definition, on every path
// this CPU can run: all 65536 fp16 / bf16 bit patterns widened, and casts of values that hit every
// case of the conversion (subnormal results, ties, the saturation edge, infinities, NaNs).
// Without F16C/AVX2 only the portable paths run (the others are then never dispatched to).
#include "common/codec/row_cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/codec/codec_math.h"

namespace osprey::codec {
namespace {

using namespace row_cast_internal;

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// Values that exercise every branch of the fp16 and bf16 conversions, then random ones at many
// scales; an odd count, so the vector loops' tails run too.
std::vector<float> Inputs() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, -65504.0f, 65519.0f, 65520.0f, -65520.0f,
                          1e6f, -1e30f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), FromBits(0x7FA00001u), FromBits(0xFFC12345u),
                          std::numeric_limits<float>::denorm_min(), 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f,
                          6.0e-5f, FromBits(0x3F801000u), FromBits(0x3F803000u), FromBits(0x3F808000u),
                          FromBits(0x3F818000u), FromBits(0x7F7F8000u), FromBits(0x7F7FFFFFu)};
  std::mt19937 rng(3);
  for (float scale : {1e-9f, 1e-7f, 1e-5f, 1e-3f, 1.0f, 1e3f, 6e4f, 1e5f}) {
    std::normal_distribution<float> d(0.0f, scale);
    for (int i = 0; i < 4001; ++i) v.push_back(d(rng));
  }
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 20001; ++i) v.push_back(FromBits(any(rng)));  // NaNs and infinities among them
  return v;
}

TEST(RowCastTest, ReferencesSaturateFiniteValuesOnly) {
  EXPECT_EQ(HalfReference(1e6f), 0x7BFFu);   // 65504
  EXPECT_EQ(HalfReference(-1e6f), 0xFBFFu);  // -65504
  EXPECT_EQ(HalfReference(std::numeric_limits<float>::infinity()), 0x7C00u);
  EXPECT_EQ(HalfReference(-std::numeric_limits<float>::infinity()), 0xFC00u);
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(HalfReference(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(Bf16Reference(std::numeric_limits<float>::max()), 0x7F7Fu);  // would round to inf
  EXPECT_EQ(Bf16Reference(std::numeric_limits<float>::infinity()), 0x7F80u);
  EXPECT_EQ(HalfReference(0.1f), FloatToHalfBits(0.1f));  // in range: the plain cast
  EXPECT_EQ(Bf16Reference(0.1f), FloatToBf16Bits(0.1f));
}

TEST(RowCastTest, CastsMatchTheReferenceBitForBit) {
  const std::vector<float> in = Inputs();
  std::vector<uint16_t> out(in.size());
  std::vector<uint8_t> bytes(in.size() * 2);
  struct Path {
    const char* name;
    bool runs;
    void (*fn)(const float*, size_t, uint16_t*);
  };
  for (const Path& p : {Path{"portable", true, &CastHalfPortable}, Path{"f16c", HaveF16c(), &CastHalfF16c}}) {
    if (!p.runs) continue;
    std::fill(out.begin(), out.end(), 0xDEADu);
    p.fn(in.data(), in.size(), out.data());
    size_t wrong = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      if (out[i] != HalfReference(in[i]) && wrong++ < 5) {
        ADD_FAILURE() << p.name << ": fp16 of " << std::hexfloat << in[i] << " (bits " << std::hex << Bits(in[i])
                      << ") is " << out[i] << ", want " << HalfReference(in[i]);
      }
    }
    EXPECT_EQ(wrong, 0u) << p.name;
  }
  ASSERT_EQ(CastRowValues(in.data(), in.size(), ValueType::kFp16, bytes.data()), in.size() * 2);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], HalfReference(in[i])) << "dispatched fp16, value " << i;
  ASSERT_EQ(CastRowValues(in.data(), in.size(), ValueType::kBf16, bytes.data()), in.size() * 2);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], Bf16Reference(in[i])) << "bf16, value " << i;
  std::vector<float> copy(in.size());
  ASSERT_EQ(CastRowValues(in.data(), in.size(), ValueType::kFp32, reinterpret_cast<uint8_t*>(copy.data())),
            in.size() * 4);
  EXPECT_EQ(std::memcmp(copy.data(), in.data(), in.size() * 4), 0);
}

// Exact bits, except that a signaling NaN may come out quiet (the F16C instruction quiets it; the
// servers' casts never produce one): then a NaN of the same sign is enough.
void ExpectWidened(float got, float want, const char* path, uint16_t half) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got) && std::signbit(got) == std::signbit(want)) << path << ": fp16 bits " << std::hex << half;
  } else {
    EXPECT_EQ(Bits(got), Bits(want)) << path << ": fp16 bits " << std::hex << half;
  }
}

TEST(RowCastTest, WideningIsExactForEveryBitPattern) {
  std::vector<uint16_t> all(65536 + 3);  // + an odd tail
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> out(all.size());
  struct Path {
    const char* name;
    bool runs;
    void (*fn)(const uint16_t*, size_t, float*);
  };
  for (const Path& p : {Path{"portable", true, &WidenHalfPortable}, Path{"f16c", HaveF16c(), &WidenHalfF16c}}) {
    if (!p.runs) continue;
    p.fn(all.data(), all.size(), out.data());
    for (size_t i = 0; i < all.size(); ++i) ExpectWidened(out[i], HalfBitsToFloat(all[i]), p.name, all[i]);
  }
  // The dispatched functions, from an odd address (reply frames promise no alignment).
  std::vector<uint8_t> shifted(all.size() * 2 + 1);
  std::memcpy(shifted.data() + 1, all.data(), all.size() * 2);
  WidenRowValues(shifted.data() + 1, all.size(), ValueType::kFp16, out.data());
  for (size_t i = 0; i < all.size(); ++i) ExpectWidened(out[i], HalfBitsToFloat(all[i]), "dispatched", all[i]);
  WidenRowValues(shifted.data() + 1, all.size(), ValueType::kBf16, out.data());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(Bits(out[i]), Bits(Bf16BitsToFloat(all[i]))) << "bf16 " << i;
}

}  // namespace
}  // namespace osprey::codec
