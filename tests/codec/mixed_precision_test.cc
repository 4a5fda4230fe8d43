// Mixed precision done safely: a gradient whose entries are below fp16's smallest subnormal
// (6e-8; typical of averaged gradients of a quiet layer) is compressed in fp32 (selection and
// error-feedback residual in fp32, only the selected values cast to fp16: value_type fp16) and,
// for contrast, cast to fp16 first and compressed from there. The fp32 path delivers the
// accumulated update; the fp16-first path loses all of it.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/dense_codecs.h"

namespace osprey::codec {
namespace {

constexpr size_t kN = 4096;
constexpr int kSteps = 400;

// A layer whose gradient is small everywhere: persistent entries of 2.0e-8 .. 2.8e-8, all below
// half of fp16's smallest subnormal (5.96e-8), so fp16 rounds each of them to 0.
std::vector<float> Gradient() {
  std::vector<float> g(kN);
  for (size_t i = 0; i < kN; ++i) g[i] = 2e-8f * (1.0f + 0.1f * static_cast<float>(i % 5));
  return g;
}

double SmallShareDelivered(bool fp16_first) {
  CodecConfig c;
  c.type = "topk";
  c.density = 0.05;
  c.error_feedback = true;
  c.value_type = "fp16";
  auto codec = MakeCodec(c);
  EXPECT_TRUE(codec.ok());
  CodecState state;
  const std::vector<float> g = Gradient();
  std::vector<float> in(kN), delivered(kN, 0.0f);
  for (int step = 0; step < kSteps; ++step) {
    for (size_t i = 0; i < kN; ++i) in[i] = fp16_first ? RoundTrip(g[i], ValueType::kFp16) : g[i];
    Encoded e;
    EXPECT_TRUE((*codec)->Encode(in.data(), kN, &state, &e).ok());
    EXPECT_TRUE((*codec)->DecodeAdd(e.view(), delivered.data(), kN, 1.0f).ok());
  }
  double want = 0, got = 0;
  for (size_t i = 0; i < kN; ++i) {
    want += static_cast<double>(g[i]) * kSteps;
    got += delivered[i];
  }
  return got / want;
}

TEST(MixedPrecisionTest, CompressingInFp32KeepsUpdatesThatFp16Loses) {
  const double fp32_path = SmallShareDelivered(false);
  const double fp16_first = SmallShareDelivered(true);
  std::printf("small updates delivered after %d steps: fp32 selection %.3f, fp16 first %.3f\n", kSteps, fp32_path,
              fp16_first);
  // fp16 first: every entry is 0 before selection; error feedback has nothing to accumulate.
  EXPECT_EQ(fp16_first, 0.0);
  // fp32 path: the fp32 residual accumulates them until an element is selected (about every
  // 1 / density = 20 steps, by then ~5e-7: representable in fp16), the fp16 rounding of what is
  // sent goes back into the residual; only the last ~20 steps are still in flight.
  EXPECT_GT(fp32_path, 0.9);
  EXPECT_LE(fp32_path, 1.0 + 1e-3);
}

}  // namespace
}  // namespace osprey::codec
